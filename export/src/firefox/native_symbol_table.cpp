// Serializes shared.nativeSymbols (native_symbol_table.h).
#include "firefox/native_symbol_table.h"

#include "firefox/columns.h"

namespace hpd::firefox {

void NativeSymbolTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.column(native_symbols::kLibIndex, [&](size_t i) { w.uint(rows_[i].lib.v); });
  t.column(native_symbols::kAddress, [&](size_t i) { w.uint(rows_[i].address); });
  t.column(native_symbols::kName, [&](size_t i) { w.uint(rows_[i].name.v); });
  t.column(native_symbols::kFunctionSize, [&](size_t i) {
    if (rows_[i].size == 0) {
      w.null();
    } else {
      w.uint(rows_[i].size);
    }
  });
  t.end();
}

}  // namespace hpd::firefox
