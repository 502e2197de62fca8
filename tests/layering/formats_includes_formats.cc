// Must compile: the probe target links ndt_formats.
#include "formats/records.h"
int NdtLayeringAllowed() { return static_cast<int>(ndt::format::OpKind::kMemcpy); }
