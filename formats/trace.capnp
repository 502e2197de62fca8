# The ndtrace record schema. formats/README.md is the spec of the container around these
# messages; this file is the spec of what one record holds.
#
# Rules (a trace written today must stay readable by every later ndtrace):
#   - never renumber or reuse an ordinal; retire a field by renaming it `obsoleteX` and
#     leaving it in place;
#   - every field says its unit and invariant;
#   - add fields at the end of a struct with the next ordinal, then update `Next ordinal`.
#
# Identities that are compared between runs (allocation ids, stream ids, thread ids,
# module ids) are assigned by ndtrace per creating thread, threads by their lineage (the
# formats README, "Identities"), so they depend neither on addresses, handles or timing nor
# on how host threads interleave. Raw addresses appear only in fields named `raw*`, which the
# comparison code ignores.

@0x8fde76747c636416;

$import "/capnp/c++.capnp".namespace("ndt::format::wire");

# ---- Header -----------------------------------------------------------------------------

# The first record of a trace, alone in the header chunk.
struct TraceHeader {
  # Next ordinal: @15
  formatVersion @0 :UInt32;        # container + schema version, see formats/README.md
  toolVersion @1 :Text;            # ndtrace version that wrote the trace, e.g. "0.1.0"
  commandLine @2 :List(Text);      # argv of the traced program, unmodified
  host @3 :Text;                   # host name
  pid @4 :UInt32;                  # OS process id of the traced process
  rank @5 :Int32;                  # RANK / LOCAL_RANK / SLURM_PROCID / OMPI rank; -1 if none
  startUnixNs @6 :UInt64;          # wall-clock start, ns since the Unix epoch
  gpus @7 :List(GpuInfo);          # devices visible to the process, by ordinal
  versions @8 :LibraryVersions;    # versions of the GPU stack as loaded
  environment @9 :List(EnvVar);    # determinism-relevant variables (see formats/README.md)
  policy @10 :Policy;              # the policy the tracer applied
  pinnedFrom @11 :Text;            # with policy = pin or replayForce: the trace choices came from
  notes @12 :List(Text);           # free-form facts the writer wants a reader to see first
  inputs @13 :List(InputFile);     # the executable, then each regular file the command line
                                   # names, as they were when recording started
  python @14 :Text;                # CPython version found in the process when recording
                                   # started (its public API, e.g. "3.11.7"); empty: none found
}

# A file the traced program was started with, for telling whether two runs are comparable.
struct InputFile {
  # Next ordinal: @4
  path @0 :Text;                   # as the command line gave it; "/proc/self/exe" target for
                                   # the executable
  bytes @1 :UInt64;                # its size
  digestLo @2 :UInt64;             # digest v1 of its bytes, lane 0 (0, 0: not read: too large)
  digestHi @3 :UInt64;             # lane 1
}

struct GpuInfo {
  # Next ordinal: @8
  ordinal @0 :UInt32;              # CUDA device ordinal as the process saw it
  name @1 :Text;                   # e.g. "NVIDIA H200"
  uuid @2 :Data;                   # 16 bytes, as cuDeviceGetUuid returns them
  ccMajor @3 :UInt32;              # compute capability major, e.g. 9
  ccMinor @4 :UInt32;              # compute capability minor, e.g. 0
  smCount @5 :UInt32;              # multiprocessor count
  memoryBytes @6 :UInt64;          # total device memory, bytes
  simulated @7 :Bool;              # true when the device is ndtrace's stand-in, not a GPU
}

# Versions as the libraries report them (cudaRuntimeGetVersion, cudnnGetVersion, ...);
# 0 means the library was not loaded or did not say.
struct LibraryVersions {
  # Next ordinal: @6
  driver @0 :UInt32;               # cuDriverGetVersion, e.g. 13000
  runtime @1 :UInt32;              # cudaRuntimeGetVersion
  cudnn @2 :UInt32;                # cudnnGetVersion, e.g. 91000
  cublas @3 :UInt32;               # cublasGetVersion
  nccl @4 :UInt32;                 # ncclGetVersion
  curand @5 :UInt32;               # curandGetVersion
}

struct EnvVar {
  # Next ordinal: @2
  name @0 :Text;
  value @1 :Text;
}

enum Policy {
  observe @0;                      # record only
  enforce @1;                      # --deterministic: nondeterministic choices replaced
  pin @2;                          # --pin TRACE: recorded choices forced
  replayForce @3;                  # replay: recorded choices and RNG state forced
}

# ---- Records ----------------------------------------------------------------------------

# One entry of a records chunk. Ops are what the program asked the GPU to do; every other
# member is metadata ndtrace adds (GFXReconstruct's rule: what the program called is kept
# apart from what the tool says about it).
struct Record {
  # Next ordinal: @10
  union {
    op @0 :OpRecord;
    allocation @1 :AllocationRecord;
    moduleLoad @2 :ModuleLoadRecord;
    nvtxRange @3 :NvtxRangeRecord;
    policyDecision @4 :PolicyDecisionRecord;
    note @5 :TracerNote;
    dropped @6 :DroppedRecords;
    stateDigest @7 :StateDigestRecord;
    pythonStack @8 :PythonStackRecord;
    gpuActivity @9 :GpuActivityRecord;
  }
}

enum OpKind {
  other @0;                        # an intercepted call of no kind below
  kernelLaunch @1;                 # cuLaunchKernel* and friends
  memcpy @2;                       # any cuMemcpy* variant
  memset @3;                       # any cuMemset* variant
  graphLaunch @4;                  # cuGraphLaunch
  cudnnConvolution @5;             # cuDNN legacy convolution forward / backward
  cudnnBackendExecute @6;          # cudnnBackendExecute of an execution plan
  cublasGemm @7;                   # cuBLAS gemm family
  cublasLtMatmul @8;               # cublasLtMatmul
  curandGenerate @9;               # curandGenerate*
  ncclCollective @10;              # NCCL collective or point-to-point call
  synchronize @11;                 # a host synchronisation (stream, event, device)
  frameworkOp @12;                 # a framework op (a PyTorch aten op) whose tensors the
                                   # Python shim named (--tensor-digests): inputs digested as it
                                   # began, outputs as it ended, each over exactly one tensor's
                                   # storage; the GPU work it issued are ops of their own before it
}

# A device address in canonical form: which allocation, and where inside it.
struct DevicePointer {
  # Next ordinal: @3
  allocationId @0 :UInt64;         # AllocationRecord.allocationId; 0 = in no known allocation
  offset @1 :UInt64;               # bytes from the allocation's start (the raw address if id 0)
  rawAddress @2 :UInt64;           # the address as the program saw it; never compared
}

# A canonicalised call argument or launch parameter.
struct Argument {
  # Next ordinal: @9
  name @0 :Text;                   # parameter name, or "arg<i>" when unknown
  union {
    none @1 :Void;                 # present but not captured
    unsigned @2 :UInt64;
    signed @3 :Int64;
    real @4 :Float64;
    text @5 :Text;
    bytes @6 :Data;                # raw parameter bytes (kernel arguments of unknown type)
    pointer @7 :DevicePointer;
    dims @8 :List(Int64);          # shapes, strides, grid and block dimensions
  }
}

# The algorithm, engine or kernel variant a library chose for this op.
struct AlgorithmChoice {
  # Next ordinal: @7
  library @0 :Text;                # "cudnn", "cublas", "cublasLt", "nccl", ...
  id @1 :Int64;                    # algorithm enum / engine global index; -1 if none
  name @2 :Text;                   # readable form, e.g. "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0"
  knobs @3 :List(Knob);            # engine knobs (cuDNN backend)
  opaque @4 :Data;                 # library-opaque choice bytes, e.g. the 64-byte cublasLtMatmulAlgo_t
  determinism @5 :Determinism;     # what the library says about this choice
  source @6 :ChoiceSource;         # how the choice was made
}

struct Knob {
  # Next ordinal: @2
  type @0 :Int64;                  # knob type enum value
  value @1 :Int64;                 # knob value
}

enum Determinism {
  unknown @0;
  deterministic @1;
  nondeterministic @2;             # e.g. CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
}

enum ChoiceSource {
  unknown @0;
  requested @1;                    # the program asked for it by id
  heuristic @2;                    # the library's heuristics picked it
  benchmark @3;                    # picked by timing (cudnnFind*, cudnn.benchmark)
  enforced @4;                     # ndtrace replaced the choice (--deterministic)
  pinned @5;                       # ndtrace forced a recorded choice (--pin, replay)
}

# Random-number-generator state an op consumed.
struct RngState {
  # Next ordinal: @6
  generator @0 :Text;              # "philox" (PyTorch PhiloxCudaState), "curand:PHILOX4_32_10", ...
  seed @1 :UInt64;
  offset @2 :UInt64;               # counter offset, in the generator's own unit
  subsequence @3 :UInt64;
  ordering @4 :Text;               # cuRAND ordering, e.g. "PSEUDO_DEFAULT"; empty if n/a
  deviceDependent @5 :Bool;        # true when results depend on the device (PSEUDO_DYNAMIC)
}

enum DType {
  unknown @0;
  f64 @1;
  f32 @2;
  f16 @3;
  bf16 @4;
  f8e4m3 @5;
  f8e5m2 @6;
  i64 @7;
  i32 @8;
  i16 @9;
  i8 @10;
  u8 @11;
  bool @12;
}

# Digest of a buffer an op read or wrote, over exactly the bytes named.
struct BufferDigest {
  # Next ordinal: @8
  role @0 :Text;                   # which operand: "x", "w", "dy", "C", "sendbuff", ...
  pointer @1 :DevicePointer;       # start of the extent
  bytes @2 :UInt64;                # extent length in bytes
  digestLo @3 :UInt64;             # digest v1 lane 0 (formats/README.md)
  digestHi @4 :UInt64;             # digest v1 lane 1
  dtype @5 :DType;                 # element type when known
  summary @6 :NumericSummary;      # optional; count = 0 when absent
  suballocated @7 :Bool;           # the extent is a whole allocation into which pointers at
                                   # other offsets were seen (a caching allocator's segment):
                                   # it may hold stale bytes no op reads, placed differently
                                   # in another run, so a difference alone is no divergence
}

# Numeric summary of a floating-point extent (for the size of a divergence).
struct NumericSummary {
  # Next ordinal: @6
  count @0 :UInt64;                # elements summarised; 0 = no summary
  min @1 :Float64;                 # smallest finite element
  max @2 :Float64;                 # largest finite element
  sum @3 :Float64;                 # sum of finite elements
  nanCount @4 :UInt64;
  infCount @5 :UInt64;
}

# One GPU op: what the program asked for, with the facts that decide its result.
struct OpRecord {
  # Next ordinal: @16
  sequence @0 :UInt64;             # op index in issue order across the process, dense from 0
  threadId @1 :UInt32;             # the thread's lineage (README "Identities"); before format
                                   # version 2: ordinal by order of first op
  streamId @2 :UInt32;             # stream id by creating thread (README "Identities");
                                   # 0 = the legacy default stream
  kind @3 :OpKind;
  name @4 :Text;                   # API name, or demangled kernel name for launches
  args @5 :List(Argument);         # canonicalised arguments, in call order
  algorithm @6 :AlgorithmChoice;   # absent when the op involves no choice
  rng @7 :RngState;                # absent when the op consumes no random state
  inputs @8 :List(BufferDigest);   # extents read, with digests
  outputs @9 :List(BufferDigest);  # extents written, with digests
  status @10 :Int32;               # the call's return code (CUresult, cudnnStatus_t, ...)
  startNs @11 :UInt64;             # host time the call entered, ns since trace start
  endNs @12 :UInt64;               # host time the call returned, ns since trace start
  moduleId @13 :UInt64;            # ModuleLoadRecord.moduleId of the kernel; 0 if n/a
  deviceOrdinal @14 :UInt32;       # device the op ran on
  nvtxRangeId @15 :UInt64;         # NvtxRangeRecord.rangeId of the innermost push/pop range
                                   # open on the op's thread when it was issued; 0 = none.
                                   # Never compared between runs
}

enum AllocationEvent {
  allocate @0;
  free @1;
}

# An allocation or free, by any path (cuMemAlloc*, async/pool, cuMemCreate + cuMemMap).
struct AllocationRecord {
  # Next ordinal: @8
  allocationId @0 :UInt64;         # canonical id: creating thread's lineage << 32 | its ordinal
                                   # (README "Identities"; version 1: by order of allocation)
  event @1 :AllocationEvent;
  bytes @2 :UInt64;                # size of the allocation
  api @3 :Text;                    # the call that made or freed it
  deviceOrdinal @4 :UInt32;
  rawAddress @5 :UInt64;           # device address; never compared
  beforeOp @6 :UInt64;             # sequence of the next op issued after this event
  streamId @7 :UInt32;             # stream of an async allocation or free; 0 otherwise
}

# A module or library of GPU code was loaded.
struct ModuleLoadRecord {
  # Next ordinal: @6
  moduleId @0 :UInt64;             # canonical id: bit 63 | the image's digest, or by loading
                                   # thread (README "Identities"; version 1: by order of load)
  api @1 :Text;                    # cuModuleLoadData, cuLibraryLoadData, ...
  imageBytes @2 :UInt64;           # size of the image
  digestLo @3 :UInt64;             # digest v1 of the image, lane 0
  digestHi @4 :UInt64;             # digest v1 of the image, lane 1
  kernels @5 :List(Text);          # demangled kernel names found in the module, if known
}

# An NVTX event of the program (the tracer is its NVTX injection library): a range pushed or
# popped on a thread, a start/end range, a mark. Only push/pop ranges that enclose an op (or a
# range that does) are written; start/end ranges and marks are written when they happen.
struct NvtxRangeRecord {
  # Next ordinal: @10
  threadId @0 :UInt32;             # lineage id of the thread that called NVTX
  push @1 :Bool;                   # true for a push (kind = push)
  name @2 :Text;                   # the message (registered strings resolved, UTF-8); empty on
                                   # pop and end
  beforeOp @3 :UInt64;             # sequence of the next op issued after this event
  timeNs @4 :UInt64;               # ns since trace start, when the program called NVTX
  kind @5 :NvtxEvent;              # what happened; a reader takes push = false with kind = push
                                   # (older traces) as a pop
  rangeId @6 :UInt64;              # the range's id: (thread lineage << 32) | ordinal of the
                                   # range among its thread's ranges (1, 2, ...); 0 for marks
  parentId @7 :UInt64;             # push: the range it opened inside (0 = outermost); else 0
  domain @8 :Text;                 # the NVTX domain's name; empty = the default domain
  category @9 :UInt32;             # the event attribute's category (0 = none)
}

enum NvtxEvent {
  push @0;                         # nvtxRangePush*, nvtxDomainRangePushEx
  pop @1;                          # nvtxRangePop, nvtxDomainRangePop
  start @2;                        # nvtxRangeStart*, nvtxDomainRangeStartEx
  end @3;                          # nvtxRangeEnd, nvtxDomainRangeEnd
  mark @4;                         # nvtxMark*, nvtxDomainMarkEx
  categoryName @5;                 # nvtx[Domain]NameCategory*: `category` is called `name`
}

# A decision the policy took, e.g. "replaced bwd-filter algo 0 by 1".
struct PolicyDecisionRecord {
  # Next ordinal: @6
  opSequence @0 :UInt64;           # the op it applied to
  library @1 :Text;
  action @2 :Text;                 # readable sentence
  fromChoice @3 :AlgorithmChoice;  # what would have run
  toChoice @4 :AlgorithmChoice;    # what ran
  applied @5 :Bool;                # false when the policy could not apply the choice
}

enum Severity {
  info @0;
  warning @1;
  error @2;
}

# Something the tracer wants the reader to know, e.g. "disabled: disk full".
struct TracerNote {
  # Next ordinal: @4
  severity @0 :Severity;
  text @1 :Text;
  beforeOp @2 :UInt64;             # sequence of the next op issued after the note
  timeNs @3 :UInt64;               # ns since trace start
}

# Records the writer had to drop because its buffers were full (drop policy).
struct DroppedRecords {
  # Next ordinal: @4
  writerId @0 :UInt32;             # the per-thread writer that dropped them
  records @1 :UInt64;              # how many records
  bytes @2 :UInt64;                # how many serialised bytes
  reason @3 :Text;                 # e.g. "buffers full", "write failed"
}

# Digests of every live allocation at one point (coarse coverage of raw kernels).
struct StateDigestRecord {
  # Next ordinal: @4
  afterOp @0 :UInt64;              # digests reflect every op up to and including this one
  reason @1 :Text;                 # "every N ops", "synchronize", "exit", "window"
  allocations @2 :List(BufferDigest);  # one per live allocation, whole extent
  timeNs @3 :UInt64;               # ns since trace start
}

# The Python stack of the thread that issued one op, taken in-process through CPython's public
# API when the op was asked for (NDTRACE_PYTHON_STACK, tracer/README.md "Python stacks"); ops
# are never sampled. Appended right after the op it names.
struct PythonStackRecord {
  # Next ordinal: @8
  opSequence @0 :UInt64;           # OpRecord.sequence of the op
  threadId @1 :UInt32;             # the op's thread (lineage id)
  laneStream @2 :UInt32;           # the op's stream's ordinal among its thread's streams, by
                                   # first use (formats/README.md "Lanes")
  laneIndex @3 :UInt64;            # the op's position in that lane, from 0
  status @4 :PythonStackStatus;
  frames @5 :List(PythonFrame);    # innermost first, at most 64; empty unless captured
  detail @6 :Text;                 # why not captured, in words; empty when captured
  python @7 :Text;                 # CPython version, e.g. "3.11.7"; empty when none found
}

enum PythonStackStatus {
  captured @0;                     # frames hold the stack
  noPython @1;                     # no CPython API in the process
  notRunning @2;                   # CPython not initialised, or finalising
  nativeThread @3;                 # the issuing thread has no Python thread state
  noFrames @4;                     # it has one, but no Python frame was executing
  gilUnavailable @5;               # the GIL could not be taken within the time limit
  unsupported @6;                  # CPython older than 3.9 (no public frame API)
  failed @7;                       # a CPython call failed
}

# One Python frame.
struct PythonFrame {
  # Next ordinal: @3
  file @0 :Text;                   # the code object's co_filename, as Python has it
  line @1 :Int32;                  # line being executed (PyFrame_GetLineNumber); -1 unknown
  function @2 :Text;               # co_name
}

enum GpuActivityKind {
  kernel @0;
  memcpy @1;
  memset @2;
}

# When the GPU ran one piece of an op's work, from CUPTI's activity API (tracer/README.md, "GPU
# time"): a kernel (one of a library op's several, or a launch of its own), a copy or a memset.
# Written when CUPTI delivers it, long after the op: tied to ops by sequence, not by position.
struct GpuActivityRecord {
  # Next ordinal: @9
  kind @0 :GpuActivityKind;
  hasOp @1 :Bool;                  # the driver call that started it was recorded as an op
  opSequence @2 :UInt64;           # that op
  hasLibraryOp @3 :Bool;           # it ran inside a library call (cuDNN, cuBLAS, ...)
  libraryOpSequence @4 :UInt64;    # that library op
  startNs @5 :UInt64;              # GPU start, ns since trace start (CUPTI's clock, mapped)
  endNs @6 :UInt64;                # GPU end, same clock
  deviceStream @7 :UInt32;         # CUPTI's stream id (not a StreamLabel id)
  ndtraceOwn @8 :Bool;             # ndtrace's own work (its digest kernels, its copies): no op's
}

# What the writer wrote, counted as it wrote it, so a reader can summarise a closed trace
# without reading its records (formats/README.md, "Writer summary"). Not a Record: it is stored
# as the content of one blob (the last chunk before the index), in a frame of record type
# 0xFFFE, and the index chunk's header points at that blob.
struct WriterSummary {
  # Next ordinal: @12
  records @0 :UInt64;              # records in records chunks (this summary not included)
  ops @1 :UInt64;                  # of which op records
  recordsByType @2 :List(UInt64);  # indexed by Record's union ordinal
  opsByKind @3 :List(UInt64);      # indexed by OpKind
  chunks @4 :UInt64;               # records and blob chunks before this one
  uncompressedBytes @5 :UInt64;    # record frames written, uncompressed
  droppedRecords @6 :UInt64;       # records lost (buffers full, a failed write, a closed writer)
  droppedBytes @7 :UInt64;         # their serialised bytes
  oversizedRecords @8 :UInt64;     # records refused as larger than 1 MiB
  stallNs @9 :UInt64;              # time appending threads waited for room (policy stall)
  stalls @10 :UInt64;              # how many times one waited
  blobs @11 :UInt64;               # distinct blobs stored (this summary not included)
}
