// Serializes shared.sources (source_table.h): the file name and the fixed start of a native file.
#include "firefox/source_table.h"

#include "firefox/columns.h"

namespace hpd::firefox {

void SourceTable::serialize(json::Writer& w) const {
  ColumnTableWriter t(w, rows_.size());
  t.repeated(sources::kId, "null");
  t.column(sources::kFilename, [&](size_t i) { w.uint(rows_[i].v); });
  t.repeated(sources::kStartLine, "1");
  t.repeated(sources::kStartColumn, "1");
  t.repeated(sources::kSourceMapUrl, "null");
  t.repeated(sources::kContent, "null");
  t.end();
}

}  // namespace hpd::firefox
