// Typed row indices of the Firefox tables: a frame takes a FuncIndex, a stack a FrameIndex, so that
// the index of one table cannot be handed to a column of another.
#pragma once

#include <cstdint>

namespace hpd::firefox {

template <typename Table>
struct TableIndex {
  uint32_t v = 0;
  friend bool operator==(TableIndex a, TableIndex b) { return a.v == b.v; }
};

using StringIndex = TableIndex<struct StringArrayTag>;
using LibIndex = TableIndex<struct LibsTag>;  // into the top-level libs array
using SourceIndex = TableIndex<struct SourceTableTag>;
using ResourceIndex = TableIndex<struct ResourceTableTag>;
using NativeSymbolIndex = TableIndex<struct NativeSymbolTableTag>;
using FuncIndex = TableIndex<struct FuncTableTag>;
using FrameIndex = TableIndex<struct FrameTableTag>;
using StackIndex = TableIndex<struct StackTableTag>;

}  // namespace hpd::firefox
