// shared.sources: one row per source file, named by its path in the string array.
#pragma once

#include "firefox/row_table.h"
#include "json_writer.h"

namespace hpd::firefox {

// A row: the file's name.
class SourceTable : public RowTable<StringIndex, SourceIndex> {
 public:
  void serialize(json::Writer& w) const;
};

}  // namespace hpd::firefox
