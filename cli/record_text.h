// hpctl record's summary lines on stderr, the same whether hpctl or hpd recorded.
#pragma once

#include "hpd/session/record_request.h"
#include "hpd/session/record_summary.h"

namespace hpd::cli {

// Prints the summary lines ("hpctl: N samples ...") on stderr, as `hpctl record` always has.
void print_record_summary(const session::RecordRequest& request, const session::RecordSummary& summary);

}  // namespace hpd::cli
