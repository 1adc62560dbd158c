// The words of a recording's choices: one table per choice, read both ways.
#include "hpd/collect/record_choices.h"

#include <array>
#include <utility>

namespace hpd {
namespace {

template <typename E, size_t N>
using Words = std::array<std::pair<E, const char*>, N>;

constexpr Words<Switch, 3> kSwitchWords{
    {{Switch::kAuto, "auto"}, {Switch::kOn, "on"}, {Switch::kOff, "off"}}};
constexpr Words<SamplingEvent, 2> kEventWords{
    {{SamplingEvent::kTaskClock, "task-clock"}, {SamplingEvent::kCpuClock, "cpu-clock"}}};
constexpr Words<Backend, 3> kBackendWords{
    {{Backend::kAuto, "auto"}, {Backend::kBpf, "bpf"}, {Backend::kPerf, "perf"}}};
constexpr Words<CallGraph, 4> kCallGraphWords{{{CallGraph::kAuto, "auto"},
                                               {CallGraph::kCfi, "cfi"},
                                               {CallGraph::kFp, "fp"},
                                               {CallGraph::kDwarf, "dwarf"}}};
constexpr Words<CallCounterKind, 3> kCallCounterWords{{{CallCounterKind::kAuto, "auto"},
                                                       {CallCounterKind::kRuntime, "runtime"},
                                                       {CallCounterKind::kUprobes, "uprobes"}}};

template <typename E, size_t N>
const char* word_of(const Words<E, N>& words, E value) {
  for (const auto& [e, word] : words)
    if (e == value) return word;
  return "?";  // not reached: every enumerator has its word
}

template <typename E, size_t N>
std::optional<E> value_of(const Words<E, N>& words, std::string_view word) {
  for (const auto& [e, w] : words)
    if (word == w) return e;
  return std::nullopt;
}

template <typename E, size_t N>
std::vector<std::string> each_of(const Words<E, N>& words) {
  std::vector<std::string> each;
  for (const auto& [e, word] : words) each.emplace_back(word);
  return each;
}

template <typename E, size_t N>
std::string list_of(const Words<E, N>& words) {
  std::string text;
  for (size_t i = 0; i < N; ++i) {
    if (i != 0) text += i + 1 == N ? " or " : ", ";
    text += words[i].second;
  }
  return text;
}

}  // namespace

const char* to_string(Switch value) {
  return word_of(kSwitchWords, value);
}
const char* to_string(SamplingEvent value) {
  return word_of(kEventWords, value);
}
const char* to_string(Backend value) {
  return word_of(kBackendWords, value);
}
const char* to_string(CallGraph value) {
  return word_of(kCallGraphWords, value);
}
const char* to_string(CallCounterKind value) {
  return word_of(kCallCounterWords, value);
}

std::optional<Switch> parse_switch(std::string_view word) {
  return value_of(kSwitchWords, word);
}
std::optional<SamplingEvent> parse_sampling_event(std::string_view word) {
  return value_of(kEventWords, word);
}
std::optional<Backend> parse_backend(std::string_view word) {
  return value_of(kBackendWords, word);
}
std::optional<CallGraph> parse_call_graph(std::string_view word) {
  return value_of(kCallGraphWords, word);
}
std::optional<CallCounterKind> parse_call_counter(std::string_view word) {
  return value_of(kCallCounterWords, word);
}

std::string switch_words() {
  return list_of(kSwitchWords);
}
std::string sampling_event_words() {
  return list_of(kEventWords);
}
std::string backend_words() {
  return list_of(kBackendWords);
}
std::string call_graph_words() {
  return list_of(kCallGraphWords);
}
std::string call_counter_words() {
  return list_of(kCallCounterWords);
}

std::vector<std::string> sampling_event_word_list() {
  return each_of(kEventWords);
}
std::vector<std::string> backend_word_list() {
  return each_of(kBackendWords);
}
std::vector<std::string> call_graph_word_list() {
  return each_of(kCallGraphWords);
}
std::vector<std::string> call_counter_word_list() {
  return each_of(kCallCounterWords);
}

}  // namespace hpd
