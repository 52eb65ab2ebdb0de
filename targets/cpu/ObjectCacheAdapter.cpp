// llvm::ObjectCache over cache::ObjectStore: the only place where LLVM meets the cache.
#include "targets/cpu/ObjectCacheAdapter.h"

#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>

#include <mutex>
#include <set>

#include <llvm/TargetParser/Triple.h>

#include "cache/ObjectStore.h"
#include "targets/cpu/ObjectCheck.h"

namespace rcjit::cpu {

namespace {

// The module's identifier is its cache key; its source file name, when set apart, says what
// it was compiled for (CpuCompileOptions::name).
std::string nameOf(const llvm::Module &m) {
  const std::string &file = m.getSourceFileName();
  return file == m.getModuleIdentifier() ? std::string() : file;
}

// Stateless: the store it forwards to is thread-safe.
class ObjectCacheAdapter : public llvm::ObjectCache {
public:
  void notifyObjectCompiled(const llvm::Module *m, llvm::MemoryBufferRef obj) override {
    auto *p = reinterpret_cast<const uint8_t *>(obj.getBufferStart());
    cache::ObjectStore::instance().store(m->getModuleIdentifier(), {p, obj.getBufferSize()},
                                         nameOf(*m));
  }

  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module *m) override {
    const std::string &id = m->getModuleIdentifier();
    cache::Bytes b = cache::ObjectStore::instance().lookup(id, nameOf(*m));
    if (!b) return nullptr;
    llvm::StringRef data(reinterpret_cast<const char *>(b->data()), b->size());
    std::string why =
        objectProblem(llvm::MemoryBufferRef(data, id), llvm::Triple(m->getTargetTriple()));
    if (!why.empty()) {
      cache::ObjectStore::instance().evict(id, why);
      return nullptr; // compiled afresh, and the good object stored
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      served_.insert(id);
    }
    return llvm::MemoryBuffer::getMemBufferCopy(data, id);
  }

  bool forget(const std::string &id, const std::string &why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (served_.erase(id) == 0) return false;
    }
    cache::ObjectStore::instance().evict(id, "it failed to link: " + why);
    return true;
  }

private:
  std::mutex mu_;
  std::set<std::string> served_; // module ids whose object came from the cache
};

ObjectCacheAdapter &adapter() {
  static ObjectCacheAdapter *a = new ObjectCacheAdapter(); // outlives every JIT
  return *a;
}

} // namespace

bool forgetCachedObject(const std::string &moduleId, const std::string &why) {
  return adapter().forget(moduleId, why);
}

std::unique_ptr<CpuJit> withObjectCache(std::unique_ptr<CpuJit> jit) {
  jit->setObjectCache(&adapter());
  return jit;
}

} // namespace rcjit::cpu
