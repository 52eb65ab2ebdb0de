// Built-in models' checkpoints: a safetensors file loaded into a module's parameters by name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/rcjit.h>

#include "tracer/Safetensors.h"

namespace rcjit::tools {

/// How checkpoint names map onto a module's parameter names (rcjit's built-in models use
/// Hugging Face's names, so most names map to themselves).
struct WeightNaming {
  /// Added to a file name that names no parameter as is ("transformer." lets GPT-2
  /// checkpoints saved from GPT2Model load into GPT2LMHeadModel's names).
  std::string modulePrefix;
  /// Regexes (whole-name match) of parameters stored transposed, [in, out], in the file
  /// (GPT-2's Conv1D weights); rcjit's Linear weights are [out, in].
  std::vector<std::string> transposed;
  /// Regexes of file names that may have no parameter: buffers and tied LM heads.
  std::vector<std::string> ignored;

  static WeightNaming exact();   // names map to themselves, nothing transposed or ignored
  static WeightNaming llama();   // LlamaForCausalLM checkpoints
  static WeightNaming gpt2();    // GPT2LMHeadModel or GPT2Model checkpoints
  static WeightNaming vitGpt2(); // VisionEncoderDecoderModel (ViT + GPT-2) checkpoints
  /// The naming of the built-in model `model`'s checkpoints (llama*, gpt2*, vit-gpt2*; exact
  /// for the others).
  static WeightNaming forModel(const std::string &model);
};

/// What loadWeights did, by parameter name (missing) or file name (the others).
struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;    // parameters the file does not hold
  std::vector<std::string> unexpected; // file tensors with no parameter and not ignored
  std::vector<std::string> ignored;    // file tensors matched by WeightNaming::ignored
};

/// Copies the tensors of the safetensors file at `path` into m's parameters (through their
/// registered slots, converting floating dtypes to the parameter's). Every shape and dtype is
/// checked before anything is copied; a mismatch, an unreadable file, or (when strict)
/// any missing or unexpected name is an rcjit::Error naming the file and the tensors.
/// Not thread-safe with respect to other users of m.
LoadReport loadWeights(nn::ModuleBase &m, const std::string &path, const WeightNaming &naming,
                       bool strict = true);
/// The same over a sharded checkpoint ("model-00001-of-00004.safetensors", ...): names are
/// matched across all the files; a name in two files counts once, then as unexpected.
LoadReport loadWeights(nn::ModuleBase &m, const std::vector<std::string> &paths,
                       const WeightNaming &naming, bool strict = true);
/// Writes m's parameters under their names, transposing those `naming` says are stored
/// transposed: the inverse of loadWeights.
void saveWeights(nn::ModuleBase &m, const std::string &path, const WeightNaming &naming);

} // namespace rcjit::tools
