// C++ stacks for the allocation runtime's unwinder (alloc_unwind_test.cpp), -O2: operator new through
// std::map, std::vector and std::string, std::function and virtual calls between, and exceptions
// thrown and caught (their allocation goes through __cxa_allocate_exception). Exits 0 when all ran.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

volatile std::uint64_t sink;

struct Shape {
  virtual ~Shape() = default;
  virtual std::uint64_t grow(unsigned n) = 0;
};

struct Square : Shape {
  std::uint64_t grow(unsigned n) override {
    std::vector<std::string> names;
    for (unsigned i = 0; i < n; ++i) names.push_back(std::string(20 + i % 50, 'x'));
    return names.size();
  }
};

__attribute__((noinline)) std::uint64_t fill_map(unsigned n) {
  std::map<std::uint64_t, std::uint64_t> m;
  for (unsigned i = 0; i < n; ++i) m[i * 2654435761u] = i;
  return m.size();
}

__attribute__((noinline)) std::uint64_t through_function(const std::function<std::uint64_t(unsigned)>& f,
                                                         unsigned depth) {
  if (depth == 0) return f(200);
  return through_function(f, depth - 1) + 1;
}

__attribute__((noinline)) void thrower(unsigned i) {
  if (i % 3 == 0) throw std::runtime_error(std::string(64 + i % 100, 'e'));
}

}  // namespace

int main() {
  std::uint64_t sum = 0;
  std::unique_ptr<Shape> shape = std::make_unique<Square>();
  for (unsigned i = 0; i < 400; ++i) sum += fill_map(500 + i % 300);
  for (unsigned i = 0; i < 400; ++i)
    sum += through_function([&shape](unsigned n) { return shape->grow(n); }, i % 20);
  for (unsigned i = 0; i < 3000; ++i) {
    try {
      thrower(i);
    } catch (const std::exception& e) {
      sum += std::string(e.what()).size();
    }
  }
  sink = sum;
  return 0;
}
