// shared.nativeSymbols: the outer functions frames' addresses lie in, each in a library.
#pragma once

#include <cstdint>
#include "firefox/row_table.h"
#include "json_writer.h"

namespace hpd::firefox {

struct NativeSymbolRow {
  LibIndex lib;  // never null in the format: a symbol without a library is not written
  uint64_t address = 0;
  StringIndex name;
  uint64_t size = 0;  // 0 = unknown, written as null
};

class NativeSymbolTable : public RowTable<NativeSymbolRow, NativeSymbolIndex> {
 public:
  void serialize(json::Writer& w) const;
};

}  // namespace hpd::firefox
