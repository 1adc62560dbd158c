// Serializes shared.stackTable (stack_table.h).
#include "firefox/stack_table.h"

#include "firefox/columns.h"

namespace hpd::firefox {

void StackTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.column(stacks::kFrame, [&](size_t i) { w.uint(rows_[i].frame.v); });
  t.column(stacks::kPrefixOffset, [&](size_t i) { w.uint(rows_[i].prefix_offset); });
  t.end();
}

}  // namespace hpd::firefox
