// shared.resourceTable: one row per library (a resource of type Library), named like it.
#pragma once

#include "firefox/row_table.h"
#include "json_writer.h"

namespace hpd::firefox {

struct ResourceRow {
  LibIndex lib;
  StringIndex name;
};

class ResourceTable : public RowTable<ResourceRow, ResourceIndex> {
 public:
  void serialize(json::Writer& w) const;
};

}  // namespace hpd::firefox
