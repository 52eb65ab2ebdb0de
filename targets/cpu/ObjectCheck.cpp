// Structural validation of ELF relocatable objects (see ObjectCheck.h).
#include "targets/cpu/ObjectCheck.h"

#include <llvm/BinaryFormat/ELF.h>
#include <llvm/Object/ELF.h>
#include <llvm/Support/MathExtras.h>
#include <llvm/Support/MemoryBufferRef.h>
#include <llvm/TargetParser/Triple.h>

namespace rcjit::cpu {

namespace {

using ELFT = llvm::object::ELF64LE;
using Shdr = ELFT::Shdr;

// Bytes patched by an x86-64 relocation type; -1 for types JITLink does not take from a
// compiler's relocatable object.
int x86RelocSize(uint32_t type) {
  namespace E = llvm::ELF;
  switch (type) {
  case E::R_X86_64_NONE:
    return 0;
  case E::R_X86_64_8:
  case E::R_X86_64_PC8:
    return 1;
  case E::R_X86_64_16:
  case E::R_X86_64_PC16:
    return 2;
  case E::R_X86_64_PC32:
  case E::R_X86_64_GOT32:
  case E::R_X86_64_PLT32:
  case E::R_X86_64_GOTPCREL:
  case E::R_X86_64_32:
  case E::R_X86_64_32S:
  case E::R_X86_64_GOTPC32:
  case E::R_X86_64_SIZE32:
  case E::R_X86_64_GOTPCRELX:
  case E::R_X86_64_REX_GOTPCRELX:
  case E::R_X86_64_TLSGD:
  case E::R_X86_64_TLSLD:
  case E::R_X86_64_DTPOFF32:
  case E::R_X86_64_GOTTPOFF:
  case E::R_X86_64_TPOFF32:
    return 4;
  case E::R_X86_64_64:
  case E::R_X86_64_PC64:
  case E::R_X86_64_GOTOFF64:
  case E::R_X86_64_GOT64:
  case E::R_X86_64_GOTPCREL64:
  case E::R_X86_64_GOTPC64:
  case E::R_X86_64_GOTPLT64:
  case E::R_X86_64_PLTOFF64:
  case E::R_X86_64_SIZE64:
  case E::R_X86_64_DTPOFF64:
  case E::R_X86_64_DTPMOD64:
  case E::R_X86_64_TPOFF64:
    return 8;
  default:
    return -1;
  }
}

uint16_t machineOf(const llvm::Triple &t) {
  switch (t.getArch()) {
  case llvm::Triple::x86_64:
    return llvm::ELF::EM_X86_64;
  case llvm::Triple::aarch64:
    return llvm::ELF::EM_AARCH64;
  case llvm::Triple::riscv64:
    return llvm::ELF::EM_RISCV;
  case llvm::Triple::ppc64le:
    return llvm::ELF::EM_PPC64;
  default:
    return llvm::ELF::EM_NONE;
  }
}

std::string str(llvm::Error e) { return llvm::toString(std::move(e)); }

// Relocation entries (Rel or Rela) of section `rs` against `target` and `nsyms` symbols.
template <class R>
std::string checkRelocs(llvm::ArrayRef<R> relocs, const Shdr &target, uint64_t nsyms, bool x86) {
  for (const R &r : relocs) {
    if (r.getSymbol(false) >= nsyms) return "a relocation names a symbol past the symbol table";
    // Symbol 0 is "no symbol": JITLink (LLVM 19) dereferences null building the error for it
    // (found by fuzz/cache_entry_fuzzer). Compilers emit it only with R_X86_64_NONE.
    if (r.getSymbol(false) == 0 && !(x86 && r.getType(false) == llvm::ELF::R_X86_64_NONE)) {
      return "a relocation names symbol 0 (no symbol)";
    }
    int size = x86 ? x86RelocSize(r.getType(false)) : 0;
    if (size < 0) return "unsupported relocation type " + std::to_string(r.getType(false));
    if (r.r_offset > target.sh_size || static_cast<uint64_t>(size) > target.sh_size - r.r_offset) {
      return "a relocation at offset " + std::to_string(r.r_offset) + " lies outside its " +
             std::to_string(target.sh_size) + "-byte section";
    }
  }
  return "";
}

std::string checkSymbols(const llvm::object::ELFFile<ELFT> &f, const Shdr &symtab,
                         llvm::ArrayRef<Shdr> sections) {
  auto syms = f.symbols(&symtab);
  if (!syms) return "bad symbol table: " + str(syms.takeError());
  auto strtab = f.getStringTableForSymtab(symtab, sections);
  if (!strtab) return "bad symbol string table: " + str(strtab.takeError());
  for (const ELFT::Sym &s : *syms) {
    if (auto name = s.getName(*strtab); !name) return "bad symbol name: " + str(name.takeError());
    uint16_t idx = s.st_shndx;
    if (idx == llvm::ELF::SHN_UNDEF || idx == llvm::ELF::SHN_ABS || idx == llvm::ELF::SHN_COMMON) {
      continue;
    }
    if (idx >= sections.size()) return "a symbol lies in a section that does not exist";
    const Shdr &sec = sections[idx];
    if (s.getType() != llvm::ELF::STT_SECTION &&
        (s.st_value > sec.sh_size || s.st_size > sec.sh_size - s.st_value)) {
      return "a symbol lies outside its section";
    }
  }
  return "";
}

} // namespace

std::string objectProblem(llvm::MemoryBufferRef object, const llvm::Triple &target) {
  auto file = llvm::object::ELFFile<ELFT>::create(object.getBuffer());
  if (!file) return "not a 64-bit little-endian ELF file: " + str(file.takeError());
  const llvm::object::ELFFile<ELFT> &f = *file;
  const auto &h = f.getHeader();
  if (h.e_ident[llvm::ELF::EI_CLASS] != llvm::ELF::ELFCLASS64 ||
      h.e_ident[llvm::ELF::EI_DATA] != llvm::ELF::ELFDATA2LSB) {
    return "not a 64-bit little-endian ELF file";
  }
  if (h.e_type != llvm::ELF::ET_REL)
    return "not a relocatable object (ELF type " + std::to_string(h.e_type) + ")";
  if (h.e_machine != machineOf(target)) {
    return "built for ELF machine " + std::to_string(h.e_machine) + ", not " + target.str();
  }
  auto sectionsOr = f.sections();
  if (!sectionsOr) return "bad section headers: " + str(sectionsOr.takeError());
  llvm::ArrayRef<Shdr> sections = *sectionsOr;
  if (sections.empty()) return "no sections";
  const uint64_t size = object.getBufferSize();
  const bool x86 = target.getArch() == llvm::Triple::x86_64;
  for (const Shdr &s : sections) {
    if (auto name = f.getSectionName(s); !name) {
      return "bad section name: " + str(name.takeError());
    }
    if (s.sh_type != llvm::ELF::SHT_NOBITS && s.sh_type != llvm::ELF::SHT_NULL &&
        (s.sh_offset > size || s.sh_size > size - s.sh_offset)) {
      return "a section's contents lie outside the " + std::to_string(size) + "-byte file";
    }
    if (s.sh_addralign > (uint64_t{1} << 16) ||
        (s.sh_addralign > 1 && !llvm::isPowerOf2_64(s.sh_addralign))) {
      return "a section has alignment " + std::to_string(s.sh_addralign);
    }
  }
  // JITLink (LLVM 19) dereferences null linking an object with nothing to allocate (found by
  // fuzz/cache_entry_fuzzer); every compiled module has code and a symbol table.
  bool symtab = false, alloc = false;
  for (const Shdr &s : sections) {
    symtab |= s.sh_type == llvm::ELF::SHT_SYMTAB;
    alloc |= (s.sh_flags & llvm::ELF::SHF_ALLOC) && s.sh_size > 0;
  }
  if (!symtab) return "no symbol table";
  if (!alloc) return "no code or data sections";
  for (const Shdr &s : sections) {
    if (s.sh_type == llvm::ELF::SHT_SYMTAB) {
      if (std::string p = checkSymbols(f, s, sections); !p.empty()) return p;
    }
    if (s.sh_type != llvm::ELF::SHT_RELA && s.sh_type != llvm::ELF::SHT_REL) continue;
    if (s.sh_link >= sections.size() || sections[s.sh_link].sh_type != llvm::ELF::SHT_SYMTAB ||
        s.sh_info >= sections.size()) {
      return "a relocation section names a missing symbol table or target section";
    }
    auto syms = f.symbols(&sections[s.sh_link]);
    if (!syms) return "bad symbol table: " + str(syms.takeError());
    const Shdr &target = sections[s.sh_info];
    std::string p;
    if (s.sh_type == llvm::ELF::SHT_RELA) {
      auto relas = f.relas(s);
      if (!relas) return "bad relocations: " + str(relas.takeError());
      p = checkRelocs(*relas, target, syms->size(), x86);
    } else {
      auto rels = f.rels(s);
      if (!rels) return "bad relocations: " + str(rels.takeError());
      p = checkRelocs(*rels, target, syms->size(), x86);
    }
    if (!p.empty()) return p;
  }
  return "";
}

} // namespace rcjit::cpu
