// shared.funcTable: one row per function, named in the string array, in a library's resource and,
// where known, a source file.
#pragma once

#include <optional>
#include "firefox/row_table.h"
#include "json_writer.h"

namespace hpd::firefox {

struct FuncRow {
  StringIndex name;
  std::optional<ResourceIndex> resource;  // none: written as -1, the format's "no resource"
  std::optional<SourceIndex> source;
};

class FuncTable : public RowTable<FuncRow, FuncIndex> {
 public:
  void serialize(json::Writer& w) const;
};

}  // namespace hpd::firefox
