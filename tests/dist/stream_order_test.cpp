// The device seam of the process group (communicator.h's device contract, work.h): with a backend
// that takes device buffers, a collective's stream waits for the point of the caller's compute
// stream at the call, the Work carries the end of the collective on that stream, and wait() orders
// the compute stream after it without the host waiting; a host backend refuses device buffers by
// name. Streams that log what is asked of them, and a communicator that only logs its calls, play
// the device here: nothing reads the buffers.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/backend/cuda/device_info.h"
#include "tessera/core/stream.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/process_group.h"
#include "tessera/dist/store/hash_store.h"

namespace tessera {
namespace {

using dist::Buffer;
using dist::Deadline;
using dist::ReduceOp;

class Log {
 public:
  void add(std::string entry) {
    std::lock_guard lock(mu_);
    entries_.push_back(std::move(entry));
  }
  std::vector<std::string> entries() const {
    std::lock_guard lock(mu_);
    return entries_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> entries_;
};

class LoggedEvent final : public Event {
 public:
  LoggedEvent(std::string name, Log& log) : name_(std::move(name)), log_(log) {}
  bool query() const override { return true; }
  void synchronize() const override { log_.add("host waits for " + name_); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  Log& log_;
};

class LoggedStream final : public Stream {
 public:
  LoggedStream(std::string name, Log& log) : name_(std::move(name)), log_(log) {}
  Device device() const override { return cuda_device(0); }
  std::shared_ptr<Event> record() override {
    auto event = std::make_shared<LoggedEvent>(name_ + " event " + std::to_string(++recorded_), log_);
    log_.add("record " + event->name());
    return event;
  }
  void wait(const Event& event) override {
    log_.add(name_ + " waits for " + dynamic_cast<const LoggedEvent&>(event).name());
  }
  void synchronize() override { log_.add("host waits for " + name_); }

 private:
  std::string name_;
  Log& log_;
  int recorded_ = 0;
};

// One rank whose collectives "run" on a device stream: they only log.
class DeviceCommunicator final : public dist::Communicator {
 public:
  DeviceCommunicator(Stream& stream, Log& log) : stream_(stream), log_(log) {}
  const char* backend_name() const override { return "logged-device"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool takes(Device) const override { return true; }
  Stream* stream(Device device) override { return device.is_cpu() ? nullptr : &stream_; }
  bool reduces_average() const override { return true; }

  void allreduce(Buffer data, ReduceOp, Deadline) override {
    log_.add("allreduce of " + std::to_string(data.count) + " on " + data.device.str());
  }
  void broadcast(Buffer, int, Deadline) override { unused("broadcast"); }
  void reduce(Buffer, ReduceOp, int, Deadline) override { unused("reduce"); }
  void allgather(Buffer, Buffer, std::span<const int64_t>, Deadline) override { unused("allgather"); }
  void reduce_scatter(Buffer, Buffer, std::span<const int64_t>, ReduceOp, Deadline) override {
    unused("reduce_scatter");
  }
  void alltoall(Buffer, Buffer, Deadline) override { unused("alltoall"); }
  void barrier(Deadline) override { unused("barrier"); }
  std::unique_ptr<dist::PendingTransfer> post_send(Buffer, int, int) override { unused("send"); }
  std::unique_ptr<dist::PendingTransfer> post_recv(Buffer, int, int) override { unused("recv"); }
  std::unique_ptr<Communicator> split(std::span<const int>, std::shared_ptr<dist::Store>,
                                      dist::Milliseconds) override {
    unused("split");
  }

 private:
  [[noreturn]] static void unused(const char* op) { throw NotSupportedError(std::string("[test] ") + op); }
  Stream& stream_;
  Log& log_;
};

std::shared_ptr<dist::ProcessGroup> device_group(Stream& communication, Log& log) {
  auto store = std::make_shared<dist::HashStore>(dist::Milliseconds(10000));
  return std::make_shared<dist::ProcessGroup>(std::make_unique<DeviceCommunicator>(communication, log), store,
                                              dist::ProcessGroupOptions{});
}

float placeholder[8];  // the "device" buffer's address: never read

TEST(StreamOrder, ACollectiveRunsAfterTheComputeStreamAndTheComputeStreamAfterIt) {
  Log log;
  LoggedStream compute("compute", log), communication("communication", log);
  StreamGuard on_compute(compute);
  auto group = device_group(communication, log);
  dist::WorkPtr work = group->allreduce(Buffer{placeholder, 8, DType::Float32, cuda_device(0)}, ReduceOp::Avg);
  work->wait();
  const std::vector<std::string> expected{
      "record compute event 1",                       // issued: the point its buffer is ready at
      "communication waits for compute event 1",      // the collective's stream waits on the device
      "allreduce of 8 on cuda:0",                     // the call issues the collective
      "record communication event 1",                 // its end, into the Work
      "compute waits for communication event 1"};     // wait(): the compute stream, not the host
  EXPECT_EQ(log.entries(), expected);
  ASSERT_NE(work->completion_event(), nullptr);
}

TEST(StreamOrder, WaitOnOrdersTheStreamGivenAndSynchronizeWaitsOnTheHost) {
  Log log;
  LoggedStream compute("compute", log), communication("communication", log), side("side", log);
  StreamGuard on_compute(compute);
  auto group = device_group(communication, log);
  dist::WorkPtr first = group->allreduce(Buffer{placeholder, 4, DType::Float32, cuda_device(0)}, ReduceOp::Sum);
  first->wait_on(side);
  dist::WorkPtr second = group->allreduce(Buffer{placeholder, 2, DType::Float32, cuda_device(0)}, ReduceOp::Sum);
  second->synchronize();
  const std::vector<std::string> entries = log.entries();
  ASSERT_EQ(entries.size(), 10u);
  EXPECT_EQ(entries[4], "side waits for communication event 1");
  EXPECT_EQ(entries[9], "host waits for communication event 2");
}

TEST(StreamOrder, HostBuffersOnADeviceBackendNeedNoStream) {
  Log log;
  LoggedStream compute("compute", log), communication("communication", log);
  StreamGuard on_compute(compute);
  auto group = device_group(communication, log);
  float host[3] = {1, 2, 3};
  dist::WorkPtr work = group->allreduce(Buffer{host, 3, DType::Float32, cpu_device()}, ReduceOp::Sum);
  work->wait();
  EXPECT_EQ(log.entries(), std::vector<std::string>{"allreduce of 3 on cpu"});
  EXPECT_EQ(work->completion_event(), nullptr);
}

TEST(StreamOrder, AHostBackendRefusesDeviceBuffersByName) {
  dist::BackendContext context;
  context.store = std::make_shared<dist::HashStore>(dist::Milliseconds(10000));
  context.rank = 0;
  context.size = 1;
  context.local_size = 1;
  context.timeout = dist::Milliseconds(10000);
  auto group = std::make_shared<dist::ProcessGroup>(dist::make_gloo_communicator(context), context.store,
                                                    dist::ProcessGroupOptions{});
  try {
    group->allreduce(Buffer{placeholder, 8, DType::Float32, cuda_device(0)}, ReduceOp::Sum);
    FAIL() << "a gloo collective over device memory";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[allreduce] a buffer on cuda:0: backend gloo"), std::string::npos)
        << e.what();
  }
}

TEST(StreamOrder, InputAndOutputOfOneCollectiveShareADevice) {
  Log log;
  LoggedStream compute("compute", log), communication("communication", log);
  StreamGuard on_compute(compute);
  auto group = device_group(communication, log);
  float host[8];
  EXPECT_THROW(group->allgather(Buffer{placeholder, 8, DType::Float32, cuda_device(0)},
                                Buffer{host, 8, DType::Float32, cpu_device()}, {8}),
               ValueError);
}

TEST(Streams, TheCpuStreamIsTheHostAndAGuardIsUndoneOnLeaving) {
  Stream& host = current_stream(cpu_device());
  EXPECT_TRUE(host.record()->query());
  Log log;
  LoggedStream outer("outer", log), inner("inner", log);
  {
    StreamGuard a(outer);
    EXPECT_EQ(&current_stream(cuda_device(0)), &outer);
    {
      StreamGuard b(inner);
      EXPECT_EQ(&current_stream(cuda_device(0)), &inner);
    }
    EXPECT_EQ(&current_stream(cuda_device(0)), &outer);
    EXPECT_EQ(&current_stream(cpu_device()), &host);  // a guard is per device
  }
  if (cuda::device_count() == 0) {
    EXPECT_THROW(current_stream(cuda_device(0)), Error);
  }
}

}  // namespace
}  // namespace tessera
