// load_module: a module's tables from its files: PT_LOAD segments, ELF and PLT symbols from the
// binary and its debug file, and the DWARF index of whichever carries .debug_info.
#include "loaded_module.h"

#include <string>
#include <utility>

#include "hpd/base/demangle.h"

namespace hpd {

std::unique_ptr<LoadedModule> load_module(DebugFileFinder& finder, const ModuleRef& ref, bool demangle,
                                          ModuleInfo& info) {
  info = ModuleInfo{};
  ModuleFiles files = finder.find(ref, info);
  const std::unique_ptr<ElfFile>& binary = files.binary;
  const std::unique_ptr<ElfFile>& debug = files.debug;
  if (!binary && !debug) return nullptr;

  auto module = std::make_unique<LoadedModule>();
  const ElfFile& primary = binary ? *binary : *debug;
  if (binary && !binary->segments().empty()) {
    module->segments = binary->segments();
  } else if (debug && !debug->segments().empty()) {
    module->segments = debug->segments().with_linear_offsets();
    info.error = "no binary with build-id " + ref.build_id + " at " + ref.path + "; using " + debug->path() +
                 " alone, assuming file offsets = vaddr - image base (GNU ld layout)";
  }
  if (module->segments.empty()) {
    info.error = primary.path() + ": no PT_LOAD program headers; not a loadable module";
    return nullptr;
  }
  if (binary) {
    add_plt_symbols(*binary, module->symbols);
    add_elf_symbols(*binary, module->symbols);
  }
  if (debug) add_elf_symbols(*debug, module->symbols);
  module->symbols.finalize();
  if (binary) {
    add_dynamic_symbols(*binary, module->exported);
    module->exported.finalize();
  }

  info.readable = true;
  info.opened_path = primary.path();
  info.build_id = primary.build_id();
  info.image_base = module->segments.image_base();
  info.symbol_count = module->symbols.size();
  const ElfFile* dwarf_file = binary && binary->has_debug_info() ? binary.get()
                              : debug && debug->has_debug_info() ? debug.get()
                                                                 : nullptr;
  if (dwarf_file != nullptr) {
    info.has_debug_info = true;
    info.debug_path = dwarf_file->path();
    // One spelling per function: inlined levels named from DWARF must read like symbol-table
    // names, or a function shows up twice (inlined and not) in call trees.
    module->debug = open_debug_info(dwarf_file->reopen_path(), &info.debug_error,
                                    demangle ? decode_rust_legacy_escapes : nullptr);
    info.dwarf_index = module->debug != nullptr;
  } else if (debug) {
    info.debug_path = debug->path();  // symbols only
  }
  return module;
}

}  // namespace hpd
