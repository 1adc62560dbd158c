// Serializes shared.frameTable (frame_table.h).
#include "firefox/frame_table.h"

#include "firefox/columns.h"

namespace hpd::firefox {

namespace {

void write_nonzero_or_null(json::Writer& w, uint32_t value) {
  if (value == 0) {
    w.null();
  } else {
    w.uint(value);
  }
}

}  // namespace

void FrameTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.column(frames::kAddress, [&](size_t i) { w.int64(rows_[i].address < 0 ? -1 : rows_[i].address); });
  t.column(frames::kInlineDepth, [&](size_t i) { w.uint(rows_[i].inline_depth); });
  t.column(frames::kCategory, [&](size_t i) { w.uint(static_cast<uint32_t>(rows_[i].category)); });
  t.column(frames::kSubcategory, [&](size_t i) { w.uint(rows_[i].subcategory); });
  t.column(frames::kFunc, [&](size_t i) { w.uint(rows_[i].func.v); });
  t.column(frames::kNativeSymbol, [&](size_t i) { write_index_or_null(w, rows_[i].native_symbol); });
  t.repeated(frames::kInnerWindowId, "0");
  t.column(frames::kLine, [&](size_t i) { write_nonzero_or_null(w, rows_[i].line); });
  t.column(frames::kColumn, [&](size_t i) { write_nonzero_or_null(w, rows_[i].column); });
  t.repeated(frames::kOriginalLocation, "null");
  t.end();
}

}  // namespace hpd::firefox
