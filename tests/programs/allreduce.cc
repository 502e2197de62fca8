// allreduce [--ranks N] [--ops LIST] [iterations]: N NCCL ranks in one process
// (ncclCommInitAll, one thread driving every rank through ncclGroupStart/End), each on its own
// stream, running the NCCL calls of LIST (comma-separated, in that order, each grouped over all
// ranks) on kCount-element float buffers of mixed magnitude; prints the checksum of the results.
//
// LIST names: allreduce (sum; the default), reducescatter (sum), reduce (sum, root N-1),
// allgather, broadcast (root N-1), bcast (in place, root N-1), alltoall, gather (root N-1),
// scatter (root N-1), sendrecv (a ring: rank r sends to r+1 and receives from r-1), or `all` for
// every one in that order. The checksum covers rank 0's all-reduce result (every rank's is
// checked equal to it) and every other call's received bytes on every rank that receives.
// Calls that only move data are checked exactly against the host copies of what was sent.
//
// Ranks default to the number of devices (on a GPU machine NCCL refuses two ranks on one GPU;
// the stand-in device allows them). Each iteration all-reduces the previous results again.
// Float addition is not associative, so the reductions' bits depend on NCCL's reduction order:
// fixed with NCCL_ALGO=Ring on the stand-in, racing otherwise.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "program_checksum.h"

namespace {

constexpr size_t kCount = 1 << 16;

bool Ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "allreduce: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

bool Ok(ncclResult_t status, const char* what) {
  if (status == ncclSuccess) return true;
  std::fprintf(stderr, "allreduce: %s: %s\n", what, ncclGetErrorString(status));
  return false;
}

// Rank r's value i: mixed signs and magnitudes from 1e-3 to 1e3, so that the order of the sum
// changes its rounding.
float Value(size_t i, int r) {
  const auto mixed = static_cast<long long>((i * 2654435761ull + static_cast<size_t>(r) * 97) %
                                            2001) -
                     1000;
  return static_cast<float>(mixed) *
         std::pow(10.0f, static_cast<float>(static_cast<int>((i + static_cast<size_t>(r)) % 7) - 3));
}

// One rank: its device buffers (kCount x ranks floats each) and the host copy of its send buffer.
struct Rank {
  int device = 0;
  float* send = nullptr;
  float* recv = nullptr;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  std::vector<float> sent;
};

const char* const kAllOps[] = {"allreduce", "reducescatter", "reduce", "allgather", "broadcast",
                               "bcast",     "alltoall",      "gather", "scatter",   "sendrecv"};

// Enqueues rank r's part of `op`.
ncclResult_t Enqueue(const std::string& op, std::vector<Rank>& ranks, size_t r) {
  Rank& me = ranks[r];
  const size_t n = ranks.size();
  const int root = static_cast<int>(n) - 1;
  if (op == "allreduce") {
    return ncclAllReduce(me.send, me.recv, kCount, ncclFloat, ncclSum, me.comm, me.stream);
  }
  if (op == "reducescatter") {
    return ncclReduceScatter(me.send, me.recv, kCount, ncclFloat, ncclSum, me.comm, me.stream);
  }
  if (op == "reduce") {
    return ncclReduce(me.send, me.recv, kCount, ncclFloat, ncclSum, root, me.comm, me.stream);
  }
  if (op == "allgather")
    return ncclAllGather(me.send, me.recv, kCount, ncclFloat, me.comm, me.stream);
  if (op == "broadcast") {
    return ncclBroadcast(me.send, me.recv, kCount, ncclFloat, root, me.comm, me.stream);
  }
  if (op == "bcast") return ncclBcast(me.recv, kCount, ncclFloat, root, me.comm, me.stream);
  if (op == "alltoall")
    return ncclAlltoAll(me.send, me.recv, kCount, ncclFloat, me.comm, me.stream);
  if (op == "gather") {
    return ncclGather(me.send, me.recv, kCount, ncclFloat, root, me.comm, me.stream);
  }
  if (op == "scatter") {
    return ncclScatter(me.send, me.recv, kCount, ncclFloat, root, me.comm, me.stream);
  }
  // sendrecv: a ring.
  const int next = static_cast<int>((r + 1) % n);
  const int previous = static_cast<int>((r + n - 1) % n);
  const ncclResult_t sent = ncclSend(me.send, kCount, ncclFloat, next, me.comm, me.stream);
  if (sent != ncclSuccess) return sent;
  return ncclRecv(me.recv, kCount, ncclFloat, previous, me.comm, me.stream);
}

// What rank r receives from `op` exactly, from the host copies of what every rank sent; empty
// for a reduction (its bits depend on the order) or when rank r receives nothing.
std::vector<float> Expected(const std::string& op, const std::vector<Rank>& ranks, size_t r) {
  const size_t n = ranks.size();
  const size_t root = n - 1;
  const auto block = [&](size_t rank, size_t index) {
    const float* first = ranks[rank].sent.data() + index * kCount;
    return std::vector<float>(first, first + kCount);
  };
  std::vector<float> expected;
  const auto append = [&](const std::vector<float>& part) {
    expected.insert(expected.end(), part.begin(), part.end());
  };
  if (op == "allgather" || (op == "gather" && r == root)) {
    for (size_t i = 0; i < n; ++i) append(block(i, 0));
  } else if (op == "broadcast" || op == "bcast") {
    append(block(root, 0));
  } else if (op == "alltoall") {
    for (size_t i = 0; i < n; ++i) append(block(i, r));
  } else if (op == "scatter") {
    append(block(root, r));
  } else if (op == "sendrecv") {
    append(block((r + n - 1) % n, 0));
  }
  return expected;
}

// The floats rank r receives from `op`.
size_t Received(const std::string& op, size_t n, size_t r) {
  const bool root = r == n - 1;
  if (op == "allgather" || op == "alltoall" || (op == "gather" && root)) return kCount * n;
  if ((op == "reduce" || op == "gather") && !root) return 0;
  return kCount;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks_wanted = 0;
  int iterations = 1;
  std::vector<std::string> ops;
  bool usage = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      ranks_wanted = std::atoi(argv[++i]);
      usage = usage || ranks_wanted < 1;
    } else if (std::strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
      const std::string list = argv[++i];
      for (size_t start = 0; start <= list.size();) {
        size_t end = list.find(',', start);
        if (end == std::string::npos) end = list.size();
        const std::string op = list.substr(start, end - start);
        if (op == "all") {
          ops.insert(ops.end(), std::begin(kAllOps), std::end(kAllOps));
        } else {
          bool known = false;
          for (const char* name : kAllOps) known = known || op == name;
          usage = usage || !known;
          ops.push_back(op);
        }
        start = end + 1;
      }
    } else {
      iterations = std::atoi(argv[i]);
      usage = usage || iterations < 1;
    }
  }
  if (usage) {
    std::fprintf(stderr,
                 "usage: allreduce [--ranks N] [--ops allreduce,reducescatter,reduce,"
                 "allgather,broadcast,bcast,alltoall,gather,scatter,sendrecv|all] "
                 "[iterations]\n");
    return 2;
  }
  if (ops.empty()) ops.push_back("allreduce");
  int devices = 0;
  if (!Ok(cudaGetDeviceCount(&devices), "cudaGetDeviceCount") || devices < 1) return 1;
  const auto n = static_cast<size_t>(ranks_wanted > 0 ? ranks_wanted : devices);
  const size_t buffer_bytes = kCount * n * sizeof(float);

  std::vector<Rank> ranks(n);
  std::vector<int> devlist(n);
  for (size_t r = 0; r < n; ++r) {
    Rank& rank = ranks[r];
    rank.device = devlist[r] = static_cast<int>(r) % devices;
    rank.sent.resize(kCount * n);
    for (size_t i = 0; i < rank.sent.size(); ++i) rank.sent[i] = Value(i, static_cast<int>(r));
    if (!Ok(cudaSetDevice(rank.device), "cudaSetDevice") ||
        !Ok(cudaMalloc(&rank.send, buffer_bytes), "cudaMalloc") ||
        !Ok(cudaMalloc(&rank.recv, buffer_bytes), "cudaMalloc") ||
        !Ok(cudaStreamCreate(&rank.stream), "cudaStreamCreate") ||
        !Ok(cudaMemcpy(rank.send, rank.sent.data(), buffer_bytes, cudaMemcpyHostToDevice),
            "cudaMemcpy")) {
      return 1;
    }
  }
  std::vector<ncclComm_t> comms(n);
  if (!Ok(ncclCommInitAll(comms.data(), static_cast<int>(n), devlist.data()), "ncclCommInitAll")) {
    return 1;
  }
  for (size_t r = 0; r < n; ++r) ranks[r].comm = comms[r];

  std::vector<float> results;
  std::vector<float> host(kCount * n);
  for (int iteration = 0; iteration < iterations; ++iteration) {
    for (const std::string& op : ops) {
      if (op == "bcast") {  // in place: the root's buffer holds what it broadcasts
        const Rank& root = ranks[n - 1];
        if (!Ok(cudaSetDevice(root.device), "cudaSetDevice") ||
            !Ok(cudaMemcpy(root.recv, root.send, kCount * sizeof(float), cudaMemcpyDeviceToDevice),
                "cudaMemcpy")) {
          return 1;
        }
      }
      if (!Ok(ncclGroupStart(), "ncclGroupStart")) return 1;
      for (size_t r = 0; r < n; ++r) {
        if (!Ok(Enqueue(op, ranks, r), op.c_str())) return 1;
      }
      if (!Ok(ncclGroupEnd(), "ncclGroupEnd")) return 1;
      std::vector<float> first;
      for (size_t r = 0; r < n; ++r) {
        const size_t received = Received(op, n, r);
        if (!Ok(cudaSetDevice(ranks[r].device), "cudaSetDevice") ||
            !Ok(cudaStreamSynchronize(ranks[r].stream), "cudaStreamSynchronize") ||
            !Ok(cudaMemcpy(host.data(), ranks[r].recv, received * sizeof(float),
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy")) {
          return 1;
        }
        const std::vector<float> mine(host.begin(), host.begin() + static_cast<long>(received));
        if (op != "allreduce") {
          const std::vector<float> expected = Expected(op, ranks, r);
          if (!expected.empty() && expected != mine) {
            std::fprintf(stderr, "allreduce: %s: rank %zu received other data than was sent\n",
                         op.c_str(), r);
            return 1;
          }
          results.insert(results.end(), mine.begin(), mine.end());
        } else if (r == 0) {
          first = mine;
        } else if (mine != first) {
          std::fprintf(stderr, "allreduce: rank %zu's result differs from rank 0's\n", r);
          return 1;
        }
      }
      if (op != "allreduce") continue;
      results.insert(results.end(), first.begin(), first.end());
      // The next iteration reduces these results again.
      for (Rank& rank : ranks) {
        if (!Ok(cudaSetDevice(rank.device), "cudaSetDevice") ||
            !Ok(cudaMemcpy(rank.send, rank.recv, kCount * sizeof(float), cudaMemcpyDeviceToDevice),
                "cudaMemcpy")) {
          return 1;
        }
        std::copy(first.begin(), first.end(), rank.sent.begin());
      }
    }
  }
  ndt::programs::PrintChecksum(results.data(), results.size() * sizeof(float));

  for (Rank& rank : ranks) {
    if (!Ok(ncclCommDestroy(rank.comm), "ncclCommDestroy") ||
        !Ok(cudaStreamDestroy(rank.stream), "cudaStreamDestroy") ||
        !Ok(cudaFree(rank.send), "cudaFree") || !Ok(cudaFree(rank.recv), "cudaFree")) {
      return 1;
    }
  }
  return 0;
}
