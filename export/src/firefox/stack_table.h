// shared.stackTable: the prefix tree of stacks, one row per (prefix, frame), a prefix always
// before the stacks that extend it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "firefox/table_index.h"
#include "json_writer.h"

namespace hpd::firefox {

class StackTable {
 public:
  // A root stack when `prefix` is none. The prefix must be a row already added: version 66 writes
  // it as an offset back (prefixOffset), which has no way to point forward.
  StackIndex add(std::optional<StackIndex> prefix, FrameIndex frame) {
    if (prefix && prefix->v >= rows_.size())
      throw std::logic_error("stack prefix " + std::to_string(prefix->v) + " is not before stack " +
                             std::to_string(rows_.size()));
    rows_.push_back(Row{prefix ? static_cast<uint32_t>(rows_.size() - prefix->v) : 0, frame});
    return StackIndex{static_cast<uint32_t>(rows_.size() - 1)};
  }
  size_t size() const { return rows_.size(); }
  void reserve(size_t rows) { rows_.reserve(rows); }

  void serialize(json::Writer& w) const;

 private:
  struct Row {
    uint32_t prefix_offset;  // 0 = a root, else the prefix is that many rows back
    FrameIndex frame;
  };
  std::vector<Row> rows_;
};

}  // namespace hpd::firefox
