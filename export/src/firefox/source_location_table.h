// shared.sourceLocationTable: required by version 66, used by JavaScript source maps only, so hpd
// writes it empty.
#pragma once

#include "firefox/columns.h"

namespace hpd::firefox {

class SourceLocationTable {
 public:
  void serialize(json::Writer& w) const {
    ColumnTableWriter t(w, 0);
    t.repeated(source_locations::kSource, "");
    t.repeated(source_locations::kLine, "");
    t.repeated(source_locations::kColumn, "");
    t.end();
  }
};

}  // namespace hpd::firefox
