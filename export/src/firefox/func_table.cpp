// Serializes shared.funcTable (func_table.h): native functions, so no JavaScript fields.
#include "firefox/func_table.h"

#include "firefox/columns.h"

namespace hpd::firefox {

void FuncTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.column(funcs::kName, [&](size_t i) { w.uint(rows_[i].name.v); });
  t.repeated(funcs::kIsJs, "false");
  t.repeated(funcs::kRelevantForJs, "false");
  t.column(funcs::kResource, [&](size_t i) {
    if (rows_[i].resource) {
      w.uint(rows_[i].resource->v);
    } else {
      w.int64(-1);
    }
  });
  t.column(funcs::kSource, [&](size_t i) { write_index_or_null(w, rows_[i].source); });
  t.repeated(funcs::kLineNumber, "null");
  t.repeated(funcs::kColumnNumber, "null");
  t.repeated(funcs::kOriginalLocation, "null");
  t.end();
}

}  // namespace hpd::firefox
