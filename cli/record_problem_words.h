// hpctl's words for the reasons the record request's one validator gives (collect's TargetProblem and
// OptionProblem, through session::RecordRequestError or the recorder's RecordTargetError and
// RecordOptionError): the only place they are worded with hpctl's flags.
#pragma once

#include <exception>
#include <string>

#include "hpd/collect/recorder.h"

namespace hpd::cli {

// "give either --pid or a command after --, not both", ...
std::string record_problem_words(TargetProblem problem);
std::string record_problem_words(OptionProblem problem);

// What hpctl prints for an error that ends a verb: a refused record request or recording in hpctl's
// words (the functions above), anything else its what().
std::string error_words(const std::exception& error);

}  // namespace hpd::cli
