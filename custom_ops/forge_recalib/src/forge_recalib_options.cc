// FORGE_RECALIB custom option parsing; see forge_recalib_options.h.
#include "forge_recalib_options.h"

#include <string.h>

// Only flexbuffer reading is used, never locale-dependent number parsing; 0
// (TFLM's patched default) avoids needing flatbuffers' compiled library.
#ifndef FLATBUFFERS_LOCALE_INDEPENDENT
#define FLATBUFFERS_LOCALE_INDEPENDENT 0
#endif
#include "flatbuffers/flexbuffers.h"

namespace forge_recalib {
namespace {

int Fail(const char** msg, const char* text) {
  if (msg != nullptr) *msg = text;
  return FORGE_RECALIB_ERR_OPTIONS;
}

bool IsByteWidth(uint64_t w) { return w == 1 || w == 2 || w == 4 || w == 8; }

// Little-endian unsigned read without alignment requirements.
uint64_t ReadUnsigned(const uint8_t* p, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The flexbuffers verifier checks alignment of most objects but not of the
// root slot nor of a map's key vector; reading those misaligned would be
// undefined behavior (and traps on some MCUs). This pre-check reads them
// byte-wise, bounds-checked, and requires natural alignment relative to the
// (8-byte aligned) buffer start. It also requires the root to be a map.
bool PrecheckLayout(const uint8_t* buf, size_t len, const char** msg,
                    int* status) {
  *status = FORGE_RECALIB_ERR_OPTIONS;
  if (len < 3) return Fail(msg, "malformed flexbuffer options: too short"), false;
  const size_t root_width = buf[len - 1];
  const uint8_t packed_type = buf[len - 2];
  if (!IsByteWidth(root_width) || len - 2 < root_width) {
    return Fail(msg, "malformed flexbuffer options: bad root width"), false;
  }
  const size_t root_pos = len - 2 - root_width;
  if (root_pos % root_width != 0) {
    return Fail(msg, "malformed flexbuffer options: misaligned root"), false;
  }
  if ((packed_type >> 2) != flexbuffers::FBT_MAP) {
    return Fail(msg, "options must be a flexbuffer map"), false;
  }
  const uint64_t map_off = ReadUnsigned(buf + root_pos, root_width);
  if (map_off > root_pos) {
    return Fail(msg, "malformed flexbuffer options: bad map offset"), false;
  }
  const size_t map_pos = root_pos - static_cast<size_t>(map_off);
  const size_t map_width = size_t{1} << (packed_type & 3);
  if (map_pos % map_width != 0 || map_pos < 3 * map_width) {
    return Fail(msg, "malformed flexbuffer options: bad map layout"), false;
  }
  const size_t keys_field = map_pos - 3 * map_width;
  const uint64_t keys_off = ReadUnsigned(buf + keys_field, map_width);
  const uint64_t key_width = ReadUnsigned(buf + keys_field + map_width, map_width);
  if (keys_off > keys_field || !IsByteWidth(key_width) ||
      (keys_field - static_cast<size_t>(keys_off)) % key_width != 0) {
    return Fail(msg, "malformed flexbuffer options: bad key vector"), false;
  }
  *status = FORGE_RECALIB_OK;
  return true;
}

bool KeyIs(const char* key, const char* name) { return strcmp(key, name) == 0; }

bool StringIs(const flexbuffers::String& s, const char* name) {
  const size_t n = strlen(name);
  return s.size() == n && memcmp(s.c_str(), name, n) == 0;
}

// The code whose name (forge_recalib.h's table) is s; false if none is.
bool NameToCode(const flexbuffers::String& s, const char* (*name_of)(int32_t),
                int32_t* code) {
  for (int32_t i = 0; name_of(i) != nullptr; ++i) {
    if (StringIs(s, name_of(i))) {
      *code = i;
      return true;
    }
  }
  return false;
}

enum class OptionRead { kOk, kWrongType, kOutOfRange };

// A map value's type and bytes, read from the (verified) values vector without
// flexbuffers' AsDouble/AsInt64: those convert between every numeric type (and
// parse strings) in float, which would link float code into an FPU-less build.
struct RawValue {
  flexbuffers::Type type;
  const uint8_t* data;  // the scalar itself (indirect ones followed)
  uint8_t width;        // its byte width
};

// Reads the protected layout of a Vector: element i sits at data_ + i * width,
// its packed type byte after the last element (flexbuffers' own layout).
struct VectorBytes : flexbuffers::Vector {
  explicit VectorBytes(const flexbuffers::Vector& v) : flexbuffers::Vector(v) {}
  RawValue At(size_t i) const {
    const uint8_t* slot = data_ + i * byte_width_;
    const uint8_t packed = data_[size() * byte_width_ + i];
    RawValue r{static_cast<flexbuffers::Type>(packed >> 2), slot, byte_width_};
    if (r.type == flexbuffers::FBT_INDIRECT_FLOAT || r.type == flexbuffers::FBT_INDIRECT_INT ||
        r.type == flexbuffers::FBT_INDIRECT_UINT) {
      r.data = slot - flexbuffers::ReadUInt64(slot, byte_width_);
      r.width = static_cast<uint8_t>(1u << (packed & 3));
    }
    return r;
  }
};

// float32 bits of a finite double's bits, rounded to nearest even (as the
// conversion), or false when it lies outside the float32 range (or is NaN).
bool DoubleBitsToFloat(uint64_t d, uint32_t* out) {
  const uint32_t sign = static_cast<uint32_t>(d >> 63) << 31;
  const int32_t e = static_cast<int32_t>((d >> 52) & 0x7FF) - 1023;
  uint64_t mant = d & ((uint64_t{1} << 52) - 1);
  if (e == 1024) return false;                       // inf, NaN
  if (e < -150) return *out = sign, true;            // below half the least subnormal
  mant |= uint64_t{1} << 52;                         // the implicit bit
  // Above FLT_MAX = 0xFFFFFF * 2^104 (checked before rounding, as the original
  // comparison of the double with FLT_MAX did).
  if (e > 127 || (e == 127 && mant > (uint64_t{0xFFFFFF} << 29))) return false;
  // float32 keeps 24 bits (normal) or fewer (subnormal, e < -126).
  const int32_t drop = 29 + (e < -126 ? -126 - e : 0);
  const uint64_t low = mant & ((uint64_t{1} << drop) - 1), half = uint64_t{1} << (drop - 1);
  uint64_t m = mant >> drop;
  if (low > half || (low == half && (m & 1u))) ++m;  // may carry into the exponent
  // Normal: biased exponent e + 127 above the implicit bit; subnormal: exponent 0.
  const uint64_t bits = e < -126 ? m : ((static_cast<uint64_t>(e + 127) << 23) + m - (1u << 23));
  *out = sign | static_cast<uint32_t>(bits);
  return true;
}

// float32 bits of a small integer (|v| < 2^24: exact).
uint32_t SmallIntToFloatBits(int32_t v) {
  if (v == 0) return 0;
  const uint32_t sign = v < 0 ? 0x80000000u : 0u;
  uint32_t a = static_cast<uint32_t>(v < 0 ? -v : v);
  int32_t e = 23;
  while (a < (1u << 23)) a <<= 1, --e;
  return sign | (static_cast<uint32_t>(e + 127) << 23) | (a & 0x7FFFFFu);
}

// Float option: any flexbuffer float width, as flexbuffers reads it (widths 1
// and 2 are integers there). A value outside the float32 range (or NaN) is
// reported, never converted; others round to the nearest float32. Integer
// operations only (see RawValue).
OptionRead ReadFloat(const RawValue& v, float* out) {
  if (v.type != flexbuffers::FBT_FLOAT && v.type != flexbuffers::FBT_INDIRECT_FLOAT) {
    return OptionRead::kWrongType;
  }
  uint32_t bits;
  if (v.width == 8) {
    if (!DoubleBitsToFloat(flexbuffers::ReadUInt64(v.data, 8), &bits)) {
      return OptionRead::kOutOfRange;
    }
  } else if (v.width == 4) {
    bits = static_cast<uint32_t>(flexbuffers::ReadUInt64(v.data, 4));
    if ((bits & 0x7F800000u) == 0x7F800000u) return OptionRead::kOutOfRange;
  } else {
    bits = SmallIntToFloatBits(static_cast<int32_t>(flexbuffers::ReadInt64(v.data, v.width)));
  }
  memcpy(out, &bits, sizeof(bits));
  return OptionRead::kOk;
}

// Integer option: any flexbuffer int or uint width, within [lo, hi].
OptionRead ReadInt(const RawValue& v, int64_t lo, int64_t hi, int32_t* out) {
  int64_t i;
  if (v.type == flexbuffers::FBT_UINT || v.type == flexbuffers::FBT_INDIRECT_UINT) {
    const uint64_t u = flexbuffers::ReadUInt64(v.data, v.width);
    if (u > static_cast<uint64_t>(hi)) return OptionRead::kOutOfRange;
    i = static_cast<int64_t>(u);
  } else if (v.type == flexbuffers::FBT_INT || v.type == flexbuffers::FBT_INDIRECT_INT) {
    i = flexbuffers::ReadInt64(v.data, v.width);
  } else {
    return OptionRead::kWrongType;
  }
  if (i < lo || i > hi) return OptionRead::kOutOfRange;
  *out = static_cast<int32_t>(i);
  return OptionRead::kOk;
}

// The option keys; `seen` in ParseOptions has one bit per key, in this order.
struct OptionKey {
  const char* name;
  const char* duplicate;
};
constexpr OptionKey kKeys[] = {
    {"momentum", "duplicate option key 'momentum'"},
    {"window", "duplicate option key 'window'"},
    {"eps", "duplicate option key 'eps'"},
    {"activation", "duplicate option key 'activation'"},
    {"variance", "duplicate option key 'variance'"},
    {"arithmetic", "duplicate option key 'arithmetic'"},
    {"label_safe", "duplicate option key 'label_safe'"},
};
enum : int { kMomentum, kWindow, kEps, kActivation, kVariance, kArithmetic, kLabelSafe };

// The index of `key` in kKeys, or -1.
int KeyIndex(const char* key) {
  for (int k = 0; k < static_cast<int>(sizeof(kKeys) / sizeof(kKeys[0])); ++k) {
    if (KeyIs(key, kKeys[k].name)) return k;
  }
  return -1;
}

// A number option's read, with its two failures' messages.
int NumberRead(OptionRead r, const char* wrong_type, const char* out_of_range,
               const char** msg) {
  if (r == OptionRead::kWrongType) return Fail(msg, wrong_type);
  if (r == OptionRead::kOutOfRange) return Fail(msg, out_of_range);
  return FORGE_RECALIB_OK;
}

// A named option (a string one of the core's names for its codes).
int NamedRead(const flexbuffers::Reference& v, const char* (*name_of)(int32_t),
              int32_t* out, const char* wrong_type, const char* unknown,
              const char** msg) {
  if (!v.IsString()) return Fail(msg, wrong_type);
  if (!NameToCode(v.AsString(), name_of, out)) return Fail(msg, unknown);
  return FORGE_RECALIB_OK;
}

// Reads the value of key k into *out.
int ReadKey(int k, const RawValue& raw, const flexbuffers::Reference& v,
            forge_recalib_options* out, const char** msg) {
  switch (k) {
    case kMomentum:
      return NumberRead(ReadFloat(raw, &out->momentum), "option 'momentum' must be a float",
                        "momentum must be a number in [0, 1]", msg);
    case kWindow:
      return NumberRead(ReadInt(raw, 1, INT32_MAX, &out->window),
                        "option 'window' must be an integer",
                        "window must be in [1, 2^31-1]", msg);
    case kEps:
      return NumberRead(ReadFloat(raw, &out->eps), "option 'eps' must be a float",
                        "eps must be finite and > 0", msg);
    case kActivation:
      return NamedRead(v, forge_recalib_activation_name, &out->activation,
                       "option 'activation' must be a string",
                       "unknown activation (none, relu, relu6)", msg);
    case kVariance:
      return NamedRead(v, forge_recalib_variance_name, &out->variance,
                       "option 'variance' must be a string",
                       "unknown variance estimator (batch, running)", msg);
    case kArithmetic:
      return NamedRead(v, forge_recalib_arithmetic_name, &out->arithmetic,
                       "option 'arithmetic' must be a string",
                       "unknown arithmetic (float, int)", msg);
    default:  // kLabelSafe
      return NumberRead(ReadInt(raw, 0, 1, &out->label_safe),
                        "option 'label_safe' must be an integer",
                        "label_safe must be 0 or 1", msg);
  }
}

}  // namespace

int ParseOptions(const uint8_t* data, size_t length, forge_recalib_options* out,
                 const char** msg) {
  if (out == nullptr) {
    if (msg != nullptr) *msg = "options output is NULL";
    return FORGE_RECALIB_ERR_NULL;
  }
  forge_recalib_options_default(out);
  if (data == nullptr || length == 0) {
    return Fail(msg, "custom options are missing (momentum or window needed)");
  }
  if (length > kMaxOptionsBytes) {
    return Fail(msg, "custom options larger than 512 bytes");
  }
  alignas(8) uint8_t buf[kMaxOptionsBytes];
  memcpy(buf, data, length);
  int status;
  if (!PrecheckLayout(buf, length, msg, &status)) return status;
  if (!flexbuffers::VerifyBuffer(buf, length)) {
    return Fail(msg, "malformed flexbuffer options: verification failed");
  }
  const flexbuffers::Map map = flexbuffers::GetRoot(buf, length).AsMap();
  const flexbuffers::TypedVector keys = map.Keys();
  const flexbuffers::Vector values = map.Values();
  const VectorBytes raw_values(values);
  if (keys.size() != values.size()) {
    return Fail(msg, "malformed flexbuffer options: key/value count mismatch");
  }
  uint32_t seen = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const flexbuffers::Reference key_ref = keys[i];
    if (!key_ref.IsKey()) return Fail(msg, "malformed flexbuffer options: key");
    const int k = KeyIndex(key_ref.AsKey());
    if (k < 0) {
      return Fail(msg, "unknown option key (momentum, window, eps, activation, "
                       "variance, arithmetic, label_safe)");
    }
    if (seen & (1u << k)) return Fail(msg, kKeys[k].duplicate);
    seen |= 1u << k;
    status = ReadKey(k, raw_values.At(i), values[i], out, msg);
    if (status != FORGE_RECALIB_OK) return status;
  }
  const bool has_momentum = (seen >> kMomentum) & 1u, has_window = (seen >> kWindow) & 1u;
  if (has_momentum == has_window) {
    return Fail(msg, "exactly one of momentum or window must be set");
  }
  out->use_window = has_window ? 1 : 0;
  return forge_recalib_validate_options(out, msg);
}

}  // namespace forge_recalib
