// The frames of a stack cut into what one machine address carries: pprof's and OTLP's "location"
// (a real frame and the frames inlined at its address), shared by both writers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hpd/model/profile.h"
#include "proto_writer.h"

namespace hpd {

// Calls `each(frames)` for each group of `stack`'s frames that share one address (the real frame, then
// the frames inlined at it: inline_depth > 0, same module and address), root first, leaf last.
template <typename Each>
void for_each_address_group(const Profile& p, uint32_t stack, Each&& each) {
  const std::vector<uint32_t> frames = p.stack_frames_root_first(stack);
  size_t begin = 0;
  for (size_t i = 1; i <= frames.size(); ++i) {
    if (i < frames.size()) {
      const Frame& f = p.frames[frames[i]];
      const Frame& head = p.frames[frames[begin]];
      if (f.inline_depth > 0 && f.lib == head.lib && f.address == head.address) continue;
    }
    each(std::span<const uint32_t>(frames.data() + begin, i - begin));
    begin = i;
  }
}

// Writes the group's frames, innermost first, as Line messages (function id, line, column: the same
// layout in pprof and OTLP) into field `field` of `location`; `function_id(func)` gives each id.
template <typename FunctionId>
void write_inline_lines(ProtoWriter& location, uint32_t field, const Profile& p,
                        std::span<const uint32_t> group, FunctionId&& function_id) {
  for (size_t i = group.size(); i-- > 0;) {
    const Frame& f = p.frames[group[i]];
    ProtoWriter line;
    line.uint_field(1, function_id(f.func));
    line.uint_field(2, f.line);
    line.uint_field(3, f.column);
    location.message_field(field, line);
  }
}

}  // namespace hpd
