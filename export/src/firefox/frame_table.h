// shared.frameTable: one row per distinct frame (an address in a function, at an inline depth).
#pragma once

#include <cstdint>
#include <optional>
#include "firefox/row_table.h"
#include "hpd/model/profile.h"
#include "json_writer.h"

namespace hpd::firefox {

struct FrameRow {
  int64_t address = -1;  // library-relative; negative = none, written as -1
  uint8_t inline_depth = 0;
  Category category = Category::kUser;
  uint32_t subcategory = 0;  // into the category's subcategories (firefox_format.h)
  FuncIndex func;
  std::optional<NativeSymbolIndex> native_symbol;
  uint32_t line = 0;    // 0 = unknown, written as null
  uint32_t column = 0;  // 0 = unknown, written as null
};

class FrameTable : public RowTable<FrameRow, FrameIndex> {
 public:
  void serialize(json::Writer& w) const;
};

}  // namespace hpd::firefox
