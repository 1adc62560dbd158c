// RecordArgs and RecordSummary as JSON: how `hpctl record` travels to hpd and its summary comes back.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "commands.h"
#include "record_pipeline.h"

namespace hpd::cli {

nlohmann::json record_args_to_json(const RecordArgs& args);
// Fields absent keep their defaults and unknown fields are ignored (an older or newer client). Throws
// std::invalid_argument naming the field when one has the wrong type or is out of range.
RecordArgs record_args_from_json(const nlohmann::json& json);

nlohmann::json record_summary_to_json(const RecordSummary& summary);
RecordSummary record_summary_from_json(const nlohmann::json& json);

}  // namespace hpd::cli
