// The Firefox Profiler's symbol-server API for source code (/source/v1) and assembly (/asm/v1),
// answered for one profile from the files hpd's symbolizer finds (see docs/open.md).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "hpd/model/profile.h"

namespace hpd {
class Symbolizer;
}

namespace hpd::cli {

class SymbolApi {
 public:
  explicit SymbolApi(const Profile& profile);
  ~SymbolApi();
  SymbolApi(const SymbolApi&) = delete;
  SymbolApi& operator=(const SymbolApi&) = delete;

  // Each takes the request's JSON body and returns the response's JSON. A request that cannot be
  // answered gets {"error": "..."} (what the profiler shows to the user), never an exception.
  //
  // /source/v1 {debugName, debugId, moduleOffset, file} -> {symbolsLastModified, sourceLastModified,
  // file, source}. Only files the profile names as a function's source file are read, and only for
  // a library of the profile, so the server never hands out any other file of the machine.
  std::string source_v1(const std::string& request_json);
  // /asm/v1 {debugName, debugId, name, codeId, startAddress, size, continueUntilFunctionEnd} ->
  // {startAddress, size, arch, syntax: ["Intel"], instructions: [[offset, text], ...]}, decoded from
  // the library's file when its build-id matches the profile's.
  std::string asm_v1(const std::string& request_json);

  // The instructions of `lib` at lib-relative [start, start + size), by lib-relative address; empty
  // with `error` set when the library's file cannot be read or decoded.
  std::map<uint64_t, std::string> disassemble(const Lib& lib, uint64_t start, uint64_t size,
                                              std::string& error);

 private:
  // Machine code of `lib` at lib-relative `start` from the file whose build-id matches the profile's.
  std::string read_lib_code(const Lib& lib, uint64_t start, uint64_t size, bool to_function_end,
                            std::string& error);

  const Profile& profile_;
  std::set<std::string> source_files_;
  std::unique_ptr<Symbolizer> symbolizer_;
};

}  // namespace hpd::cli
