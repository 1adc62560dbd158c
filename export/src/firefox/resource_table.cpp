// Serializes shared.resourceTable (resource_table.h).
#include "firefox/resource_table.h"

#include "firefox/columns.h"

namespace hpd::firefox {

void ResourceTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.column(resources::kLib, [&](size_t i) { w.uint(rows_[i].lib.v); });
  t.column(resources::kName, [&](size_t i) { w.uint(rows_[i].name.v); });
  t.repeated(resources::kHost, "null");
  t.repeated(resources::kType, "1");  // 1 = Library
  t.end();
}

}  // namespace hpd::firefox
