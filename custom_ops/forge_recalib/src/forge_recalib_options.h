// FORGE_RECALIB custom options: flexbuffer map -> forge_recalib_options.
//
// Framework-free C++ (depends only on flatbuffers' flexbuffers.h); shared by
// the TFLM kernel (Init) and the fuzz harness. Untrusted bytes are copied to
// an 8-byte aligned buffer, their top-level layout is checked, and
// flexbuffers::VerifyBuffer runs before any value is read. No allocation.
//
// Accepted map (SPEC.md "Options"); any other key, a duplicate key or a value
// of another flexbuffer type is an error:
//   "momentum"   float in [0, 1]      } exactly one of the two
//   "window"     int in [1, 2^31-1]   }
//   "eps"        float, finite, > 0 as float32 (default 1e-5)
//   "activation" string "none" | "relu" | "relu6" (default "none")
//   "variance"   string "batch" | "running"       (default "running")
// Floats may be stored with any flexbuffer float width; a value outside the
// float32 range is rejected, others are rounded to nearest float32.
#ifndef FORGE_RECALIB_OPTIONS_H_
#define FORGE_RECALIB_OPTIONS_H_

#include <stddef.h>
#include <stdint.h>

#include "forge_recalib.h"

namespace forge_recalib {

// Larger option buffers are rejected (a valid map is about 100 bytes); this is
// also the size of the aligned stack copy.
constexpr size_t kMaxOptionsBytes = FORGE_RECALIB_MAX_OPTIONS_BYTES;

// Fills *out (defaults first) and validates it with
// forge_recalib_validate_options. Returns a forge_recalib_status; on error
// *msg (if msg is not null) is a static string.
int ParseOptions(const uint8_t* data, size_t length,
                 forge_recalib_options* out, const char** msg);

}  // namespace forge_recalib

#endif  // FORGE_RECALIB_OPTIONS_H_
