#include "compiler/plan_file.h"

#include <algorithm>

#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm/read_file.h"

namespace ag::compiler {
namespace {

constexpr char kMagic[8] = {'A', 'G', 'P', 'L', 'A', 'N', '\r', '\n'};
constexpr size_t kHeaderBytes = 32;

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void I64(int64_t v) { Raw(&v, 8); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  void Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void Ints(const std::vector<int64_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) I64(x);
  }
  void Type(const ir::TensorType& t) {
    U8(static_cast<uint8_t>(t.dtype));
    U32(static_cast<uint32_t>(t.shape.size()));
    for (const ir::Dim& d : t.shape) {
      Str(d.symbol());
      I64(d.offset());
    }
  }
  void Tensor(const PlanTensor& t) {
    U8(static_cast<uint8_t>(t.kind));
    I64(t.index);
    Type(t.type);
  }
  void Attrs(const ir::Attrs& attrs) {
    U32(static_cast<uint32_t>(attrs.size()));
    for (const auto& [name, value] : attrs) {
      Str(name);
      U8(static_cast<uint8_t>(ir::KindOf(value)));
      switch (ir::KindOf(value)) {
        case ir::AttrKind::kInt:
          I64(std::get<int64_t>(value));
          break;
        case ir::AttrKind::kFloat:
          F64(std::get<double>(value));
          break;
        case ir::AttrKind::kString:
          Str(std::get<std::string>(value));
          break;
        case ir::AttrKind::kIntList:
          Ints(std::get<std::vector<int64_t>>(value));
          break;
      }
    }
  }
  const std::string& bytes() const { return out_; }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// Every read is bounds-checked; the first failure sticks and later reads return zeros.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}

  uint8_t U8() {
    uint8_t v = 0;
    Raw(&v, 1);
    return v;
  }
  uint32_t U32() {
    uint32_t v = 0;
    Raw(&v, 4);
    return v;
  }
  int64_t I64() {
    int64_t v = 0;
    Raw(&v, 8);
    return v;
  }
  double F64() {
    double v = 0;
    Raw(&v, 8);
    return v;
  }
  // A count of items of at least `min_item_bytes` each: cannot exceed what is left.
  uint32_t Count(size_t min_item_bytes) {
    const uint32_t n = U32();
    if (n > (data_.size() - pos_) / std::max<size_t>(min_item_bytes, 1)) {
      Fail("a list count runs past the end of the file");
      return 0;
    }
    return n;
  }
  std::string Str() {
    const uint32_t n = Count(1);
    std::string s;
    if (ok_) {
      s.assign(data_.data() + pos_, n);
      pos_ += n;
    }
    return s;
  }
  std::vector<int64_t> Ints() {
    std::vector<int64_t> v(Count(8));
    for (int64_t& x : v) x = I64();
    return v;
  }
  ir::TensorType Type() {
    ir::TensorType t;
    const uint8_t dtype = U8();
    if (dtype >= ir::kDTypeCount) Fail("unknown dtype code");
    t.dtype = static_cast<ir::DType>(ok_ ? dtype : 0);
    const uint32_t rank = Count(12);
    for (uint32_t i = 0; i < rank && ok_; ++i) {
      std::string symbol = Str();
      const int64_t offset = I64();
      t.shape.push_back(symbol.empty() ? ir::Dim(offset) : ir::Dim::Sym(std::move(symbol), offset));
    }
    return t;
  }
  PlanTensor Tensor() {
    PlanTensor t;
    const uint8_t kind = U8();
    if (kind > static_cast<uint8_t>(TensorKind::kState)) Fail("unknown operand kind");
    t.kind = static_cast<TensorKind>(ok_ ? kind : 0);
    t.index = I64();
    t.type = Type();
    return t;
  }
  ir::Attrs Attrs() {
    ir::Attrs attrs;
    const uint32_t n = Count(5);
    for (uint32_t i = 0; i < n && ok_; ++i) {
      std::string name = Str();
      switch (U8()) {
        case 0:
          attrs[name] = I64();
          break;
        case 1:
          attrs[name] = F64();
          break;
        case 2:
          attrs[name] = Str();
          break;
        case 3:
          attrs[name] = Ints();
          break;
        default:
          Fail("unknown attribute kind");
      }
    }
    return attrs;
  }

  void Fail(std::string message) {
    if (ok_) error_ = std::move(message);
    ok_ = false;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == data_.size(); }
  const std::string& error() const { return error_; }

 private:
  void Raw(void* p, size_t n) {
    if (!ok_ || data_.size() - pos_ < n) {
      Fail("unexpected end of data");
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
  }

  absl::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

template <typename T, typename F>
std::vector<T> ReadList(Reader& r, size_t min_item_bytes, F read_one) {
  std::vector<T> items(r.Count(min_item_bytes));
  for (T& item : items) {
    if (!r.ok()) break;
    item = read_one();
  }
  return items;
}

void WriteProgram(Writer& w, const Program& program) {
  w.Str(program.name);
  std::vector<std::pair<std::string, int64_t>> bounds(program.bounds.begin(), program.bounds.end());
  std::sort(bounds.begin(), bounds.end());  // a fixed order: equal plans are equal files
  w.U32(static_cast<uint32_t>(bounds.size()));
  for (const auto& [symbol, bound] : bounds) {
    w.Str(symbol);
    w.I64(bound);
  }
  w.I64(program.arena_bytes);
  for (const auto* list : {&program.inputs, &program.states}) {
    w.U32(static_cast<uint32_t>(list->size()));
    for (const PlanInput& in : *list) {
      w.Str(in.name);
      w.Type(in.type);
    }
  }
  w.U32(static_cast<uint32_t>(program.steps.size()));
  for (const PlanStep& s : program.steps) {
    w.U8(static_cast<uint8_t>(s.kernel));
    w.Attrs(s.attrs);
    for (const auto* list : {&s.operands, &s.results}) {
      w.U32(static_cast<uint32_t>(list->size()));
      for (const PlanTensor& t : *list) w.Tensor(t);
    }
    w.I64(s.layer);
    w.Str(s.name);
  }
  w.U32(static_cast<uint32_t>(program.outputs.size()));
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    w.Str(program.output_names[i]);
    w.Tensor(program.outputs[i]);
  }
}

Program ReadProgram(Reader& r) {
  Program program;
  program.name = r.Str();
  const uint32_t bounds = r.Count(12);
  for (uint32_t i = 0; i < bounds && r.ok(); ++i) {
    std::string symbol = r.Str();
    program.bounds[symbol] = r.I64();
  }
  program.arena_bytes = r.I64();
  auto read_input = [&] {
    PlanInput in;
    in.name = r.Str();
    in.type = r.Type();
    return in;
  };
  program.inputs = ReadList<PlanInput>(r, 9, read_input);
  program.states = ReadList<PlanInput>(r, 9, read_input);
  program.steps = ReadList<PlanStep>(r, 22, [&] {
    PlanStep s;
    const uint8_t kernel = r.U8();
    if (kernel >= ir::kOpCount) r.Fail(absl::StrCat("unknown kernel id ", kernel));
    s.kernel = static_cast<ir::OpId>(r.ok() ? kernel : 0);
    s.attrs = r.Attrs();
    s.operands = ReadList<PlanTensor>(r, 13, [&] { return r.Tensor(); });
    s.results = ReadList<PlanTensor>(r, 13, [&] { return r.Tensor(); });
    s.layer = static_cast<int32_t>(r.I64());
    s.name = r.Str();
    return s;
  });
  const uint32_t outputs = r.Count(17);
  for (uint32_t i = 0; i < outputs && r.ok(); ++i) {
    program.output_names.push_back(r.Str());
    program.outputs.push_back(r.Tensor());
  }
  return program;
}

}  // namespace

std::string SerializePlan(const Plan& plan) {
  Writer w;
  const ModelInfo& m = plan.model;
  w.Str(m.layout);
  w.I64(m.vocab_size);
  w.I64(m.hidden_size);
  w.I64(m.num_layers);
  w.I64(m.max_position_embeddings);
  w.Ints(m.eos_token_ids);
  w.Str(m.config);
  w.I64(m.image_token_id);
  w.I64(m.patches_per_token);
  w.U8(static_cast<uint8_t>(plan.dtype));
  w.I64(plan.max_batch_tokens);
  w.I64(plan.max_seqs);
  w.U32(static_cast<uint32_t>(plan.tp));
  w.U32(static_cast<uint32_t>(plan.passes.size()));
  for (const std::string& p : plan.passes) w.Str(p);
  w.U32(static_cast<uint32_t>(plan.weights.size()));
  for (const WeightEntry& e : plan.weights) {
    w.Str(e.name);
    w.U8(static_cast<uint8_t>(e.dtype));
    w.Ints(e.shape);
    w.U32(static_cast<uint32_t>(e.pieces.size()));
    for (const WeightPiece& p : e.pieces) {
      w.Str(p.tensor);
      w.Ints(p.tensor_shape);
      w.I64(p.row_begin);
      w.I64(p.row_end);
      w.U8(static_cast<uint8_t>(p.shard.axis + 1));
      w.U32(static_cast<uint32_t>(p.shard.parts));
      w.U8(static_cast<uint8_t>(p.quant.kind));
      w.U32(static_cast<uint32_t>(p.quant.group));
      w.U8(p.quant.symmetric ? 1 : 0);
      w.U8(static_cast<uint8_t>(p.quant.act));
      w.U8(static_cast<uint8_t>(p.packing));
    }
  }
  w.I64(plan.kv.num_layers);
  w.I64(plan.kv.block_size);
  w.I64(plan.kv.kv_heads);
  w.I64(plan.kv.head_dim);
  w.U8(static_cast<uint8_t>(plan.kv.dtype));
  w.U32(static_cast<uint32_t>(plan.kv.scale_weights.size()));
  for (int32_t i : plan.kv.scale_weights) w.U32(static_cast<uint32_t>(i));
  w.U32(static_cast<uint32_t>(plan.programs.size()));
  for (const Program& program : plan.programs) WriteProgram(w, program);
  return SealPlanPayload(w.bytes());
}

std::string SealPlanPayload(absl::string_view payload) {
  std::string file(kMagic, sizeof(kMagic));
  const uint32_t version = kPlanVersion, reserved = 0;
  const uint64_t size = payload.size(), checksum = Fnv1a64(payload);
  file.append(reinterpret_cast<const char*>(&version), 4);
  file.append(reinterpret_cast<const char*>(&reserved), 4);
  file.append(reinterpret_cast<const char*>(&size), 8);
  file.append(reinterpret_cast<const char*>(&checksum), 8);
  file.append(payload.data(), payload.size());
  return file;
}

absl::StatusOr<Plan> DeserializePlan(absl::string_view bytes, absl::string_view source) {
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
  };
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return fail("not an .agplan file (bad magic or too short)");
  }
  uint32_t version;
  uint64_t size, checksum;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&size, bytes.data() + 16, 8);
  std::memcpy(&checksum, bytes.data() + 24, 8);
  if (version != kPlanVersion) {
    return fail(absl::StrCat("plan format version ", version, " is not supported (this build reads version ",
                             kPlanVersion, "); recompile the plan"));
  }
  const absl::string_view payload = bytes.substr(kHeaderBytes);
  if (size != payload.size()) {
    return fail(absl::StrCat("truncated or padded: header says ", size, " payload bytes, file has ", payload.size()));
  }
  if (Fnv1a64(payload) != checksum) return fail("checksum mismatch (the file is corrupt)");

  Reader r(payload);
  Plan plan;
  plan.version = version;
  ModelInfo& m = plan.model;
  m.layout = r.Str();
  m.vocab_size = r.I64();
  m.hidden_size = r.I64();
  m.num_layers = r.I64();
  m.max_position_embeddings = r.I64();
  m.eos_token_ids = r.Ints();
  m.config = r.Str();
  m.image_token_id = r.I64();
  m.patches_per_token = r.I64();
  const uint8_t dtype = r.U8();
  if (dtype >= ir::kDTypeCount) r.Fail("unknown dtype code");
  plan.dtype = static_cast<ir::DType>(r.ok() ? dtype : 0);
  plan.max_batch_tokens = r.I64();
  plan.max_seqs = r.I64();
  plan.tp = static_cast<int32_t>(std::min<uint32_t>(r.U32(), 1u << 30));
  plan.passes = ReadList<std::string>(r, 4, [&] { return r.Str(); });
  plan.weights = ReadList<WeightEntry>(r, 13, [&] {
    WeightEntry e;
    e.name = r.Str();
    const uint8_t wd = r.U8();
    if (wd >= ir::kDTypeCount) r.Fail("unknown dtype code");
    e.dtype = static_cast<ir::DType>(r.ok() ? wd : 0);
    e.shape = r.Ints();
    e.pieces = ReadList<WeightPiece>(r, 36, [&] {
      WeightPiece p;
      p.tensor = r.Str();
      p.tensor_shape = r.Ints();
      p.row_begin = r.I64();
      p.row_end = r.I64();
      p.shard.axis = static_cast<int32_t>(r.U8()) - 1;
      p.shard.parts = static_cast<int32_t>(std::min<uint32_t>(r.U32(), 1u << 30));
      const uint8_t kind = r.U8();
      if (kind > static_cast<uint8_t>(ir::QuantKind::kInt4)) r.Fail("unknown weight format code");
      p.quant.kind = static_cast<ir::QuantKind>(r.ok() ? kind : 0);
      p.quant.group = static_cast<int32_t>(std::min<uint32_t>(r.U32(), 1u << 30));
      const uint8_t sym = r.U8();
      if (sym > 1) r.Fail("bad weight format symmetry flag");
      p.quant.symmetric = sym == 1;
      const uint8_t act = r.U8();
      if (act > static_cast<uint8_t>(ir::ActQuant::kInt8)) r.Fail("unknown input quantization code");
      p.quant.act = static_cast<ir::ActQuant>(r.ok() ? act : 0);
      const uint8_t packing = r.U8();
      if (packing >= ir::kQuantPackingCount) r.Fail("unknown weight packing code");
      p.packing = static_cast<ir::QuantPacking>(r.ok() ? packing : 0);
      return p;
    });
    return e;
  });
  plan.kv.num_layers = r.I64();
  plan.kv.block_size = r.I64();
  plan.kv.kv_heads = r.I64();
  plan.kv.head_dim = r.I64();
  const uint8_t kvd = r.U8();
  if (kvd >= ir::kDTypeCount) r.Fail("unknown dtype code");
  plan.kv.dtype = static_cast<ir::DType>(r.ok() ? kvd : 0);
  plan.kv.scale_weights = ReadList<int32_t>(r, 4, [&] { return static_cast<int32_t>(std::min<uint32_t>(r.U32(), 1u << 30)); });
  plan.programs = ReadList<Program>(r, 30, [&] { return ReadProgram(r); });
  if (!r.ok()) return fail(r.error());
  if (!r.at_end()) return fail("trailing bytes after the plan");
  absl::Status valid = ValidatePlan(plan);
  if (!valid.ok()) return fail(valid.message());
  return plan;
}

absl::Status WritePlanFile(const Plan& plan, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  const std::string bytes = SerializePlan(plan);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<Plan> ReadPlanFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, glm::ReadWholeFile(path));
  return DeserializePlan(bytes, path);
}

}  // namespace ag::compiler
