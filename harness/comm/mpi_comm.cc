// RAII for the MPI session and for communicators we own.
#include "harness/comm/mpi_comm.h"

#include <climits>
#include <sstream>
#include <utility>

namespace dtl {

namespace {
const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}
}  // namespace

MpiSession::MpiSession(int* argc, char*** argv, int required) {
  DTL_MPI_CHECK(MPI_Init_thread(argc, argv, required, &provided_));
  if (provided_ < required) {
    std::ostringstream out;
    out << "MPI_Init_thread: asked for " << thread_level_name(required) << " but MPI provides only "
        << thread_level_name(provided_) << " [" << where_am_i() << "]";
    MPI_Finalize();
    throw MpiError(out.str(), MPI_ERR_OTHER);
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Comm::Comm(MPI_Comm parent) {
  MPI_Comm dup = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_dup(parent, &dup));
  adopt(dup);
}

Comm Comm::split(MPI_Comm parent, int color, int key) {
  MPI_Comm part = MPI_COMM_NULL;
  DTL_MPI_CHECK(MPI_Comm_split(parent, color, key, &part));
  Comm out;
  out.adopt(part);
  return out;
}

void Comm::adopt(MPI_Comm owned) {
  comm_ = owned;
  DTL_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  DTL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DTL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Comm::~Comm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Comm::Comm(Comm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    Comm old(std::move(*this));  // frees our previous handle on scope exit
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = other.rank_;
    size_ = other.size_;
  }
  return *this;
}

void Comm::barrier() const { DTL_MPI_CHECK(MPI_Barrier(comm_)); }

std::string format_bytes(std::size_t bytes) {
  std::ostringstream out;
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) {
    out << bytes / (1u << 30) << " GiB";
  } else if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) {
    out << bytes / (1u << 20) << " MiB";
  } else if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) {
    out << bytes / (1u << 10) << " KiB";
  } else {
    out << bytes << " B";
  }
  return out.str();
}

RankSize rank_and_size(MPI_Comm comm) {
  RankSize place{0, 0};
  DTL_MPI_CHECK(MPI_Comm_rank(comm, &place.rank));
  DTL_MPI_CHECK(MPI_Comm_size(comm, &place.size));
  return place;
}

void require_blocks(const char* function, const char* argument, std::size_t elements, std::size_t block,
                    int blocks) {
  DTL_REQUIRE_ARG(elements == block * static_cast<std::size_t>(blocks), function, argument,
                  "has " + std::to_string(elements) + " elements; it must hold " + std::to_string(blocks) +
                      " blocks of " + std::to_string(block));
}

void require_tag(const char* function, int tag) {
  DTL_REQUIRE_ARG(tag >= 0 && tag <= 32767, function, "tag",
                  "is " + std::to_string(tag) + "; it must be in [0, 32767]");
}

void require_rank(const char* function, const char* argument, int rank, int size) {
  DTL_REQUIRE_ARG(rank >= 0 && rank < size, function, argument,
                  "is " + std::to_string(rank) + ", not a rank of a " + std::to_string(size) +
                      "-rank communicator");
}

int to_mpi_count(std::size_t count, const char* function, const char* argument) {
  DTL_REQUIRE_ARG(count <= static_cast<std::size_t>(INT_MAX), function, argument,
                  "has " + std::to_string(count) + " elements, more than MPI's int count allows");
  return static_cast<int>(count);
}

MPI_Datatype mpi_datatype_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kF16:
    case DType::kBF16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

}  // namespace dtl
