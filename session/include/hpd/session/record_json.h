// RecordRequest and RecordSummary as JSON: how a recording travels to hpd and its summary comes back.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "hpd/session/record_request.h"
#include "hpd/session/record_summary.h"

namespace hpd::session {

nlohmann::json record_request_to_json(const RecordRequest& request);
// Fields absent keep their defaults and unknown fields are ignored (an older or newer client). Throws
// std::invalid_argument naming the field when one has the wrong type, is out of range, or names no
// choice of its kind ("kernel": "maybe").
RecordRequest record_request_from_json(const nlohmann::json& json);

nlohmann::json record_summary_to_json(const RecordSummary& summary);
RecordSummary record_summary_from_json(const nlohmann::json& json);

}  // namespace hpd::session
