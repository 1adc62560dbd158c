// The mapping of errors to replies (hpd/service/error_reply.h).
#include "hpd/service/error_reply.h"

#include "hpd/collect/recorder.h"
#include "hpd/session/record_pipeline.h"

namespace hpd::service {

ErrorReply error_reply_for(const std::exception& error) {
  if (const auto* e = dynamic_cast<const ProtocolError*>(&error)) return {e->code(), e->what(), false};
  if (dynamic_cast<const session::RecordRequestError*>(&error) != nullptr)
    return {ErrorCode::kBadRequest, error.what(), false};
  if (dynamic_cast<const RecordError*>(&error) != nullptr)
    return {ErrorCode::kRecordFailed, error.what(), false};
  return {ErrorCode::kInternal, kInternalErrorText, true};
}

}  // namespace hpd::service
