// Writes one column table of the processed format, {"length": N, name: [N values], ...}: the one
// place the tables' serializers share.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "firefox/table_index.h"
#include "hpd/export/firefox/schema.h"
#include "json_writer.h"

namespace hpd::firefox {

class ColumnTableWriter {
 public:
  // Opens the table's object and writes its length; end() closes it.
  ColumnTableWriter(json::Writer& w, size_t length) : w_(w), length_(length) {
    w_.begin_object();
    w_.key(kLength);
    w_.uint(length_);
  }
  ColumnTableWriter(const ColumnTableWriter&) = delete;
  ColumnTableWriter& operator=(const ColumnTableWriter&) = delete;

  // A column whose value i each(i) writes through json().
  template <typename Each>
  void column(const char* name, Each&& each) {
    w_.key(name);
    w_.begin_array();
    for (size_t i = 0; i < length_; ++i) each(i);
    w_.end_array();
  }

  // A column holding the same JSON token in every row.
  void repeated(const char* name, std::string_view token) {
    column(name, [&](size_t) { w_.raw(token); });
  }

  // A key that is not a column: a scalar the caller writes next (samples' weightType, a null weight).
  void field(const char* name) { w_.key(name); }

  json::Writer& json() { return w_; }

  // Closes the table's object. Not done by a destructor: the sink may throw, and must not during
  // an unwind.
  void end() { w_.end_object(); }

 private:
  json::Writer& w_;
  size_t length_;
};

template <typename Table>
void write_index_or_null(json::Writer& w, std::optional<TableIndex<Table>> index) {
  if (index) {
    w.uint(index->v);
  } else {
    w.null();
  }
}

}  // namespace hpd::firefox
