// The row storage every Firefox table builder shares: rows appended in order, each named by the
// table's own typed index (table_index.h); the table adds only its Row type and its serializer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "firefox/table_index.h"

namespace hpd::firefox {

template <typename Row, typename Index>
class RowTable {
 public:
  Index add(const Row& row) {
    rows_.push_back(row);
    return Index{static_cast<uint32_t>(rows_.size() - 1)};
  }
  size_t size() const { return rows_.size(); }
  void reserve(size_t rows) { rows_.reserve(rows); }

 protected:
  std::vector<Row> rows_;
};

}  // namespace hpd::firefox
