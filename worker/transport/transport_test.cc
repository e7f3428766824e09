#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/run_id.h"
#include "gtest/gtest.h"
#include "worker/transport/frame_validator.h"
#include "worker/transport/inbox.h"
#include "worker/transport/peer_sender.h"
#include "worker/transport/stage_link_service.h"

namespace paci {
namespace {

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

LinkExpectations Expect() {
  LinkExpectations e;
  e.job_name = "job";
  e.secret = kSecret;
  e.stage = 1;
  e.num_stages = 3;
  e.hidden_shape = {2, 3, 4};
  return e;
}

v1::TensorFrame Activation(uint64_t id) {
  v1::TensorFrame f;
  f.set_kind(v1::TensorFrame::ACTIVATION);
  f.set_job_name("job");
  f.set_from_stage(0);
  f.set_micro_batch_id(id);
  f.set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : {2, 3, 4}) f.add_shape(d);
  f.set_data(std::string(2 * 3 * 4 * 4, '\0'));
  return f;
}

void ExpectRefused(const v1::TensorFrame& f, const std::string& fragment) {
  absl::Status status = ValidateFrame(f, Expect());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << fragment;
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

TEST(FrameValidatorTest, AcceptsAWellFormedActivationAndGradient) {
  EXPECT_TRUE(ValidateFrame(Activation(0), Expect()).ok());
  v1::TensorFrame g = Activation(0);
  g.set_kind(v1::TensorFrame::GRADIENT);
  g.set_from_stage(2);
  EXPECT_TRUE(ValidateFrame(g, Expect()).ok());
}

// Where `auto` lets each stage choose its precision, a hidden state may come
// in float32 or bfloat16 (its bytes matching), nothing else.
TEST(FrameValidatorTest, EitherLinkDtypeWhereTheStagesChooseTheirPrecision) {
  LinkExpectations either = Expect();
  either.dtypes = {v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16};
  v1::TensorFrame f = Activation(0);
  EXPECT_TRUE(ValidateFrame(f, either).ok());
  f.set_dtype(v1::DTYPE_BFLOAT16);
  EXPECT_EQ(ValidateFrame(f, either).code(), absl::StatusCode::kInvalidArgument);  // 96 bytes
  f.set_data(std::string(2 * 3 * 4 * 2, '\0'));
  EXPECT_TRUE(ValidateFrame(f, either).ok());
  f.set_dtype(v1::DTYPE_FLOAT16);
  const absl::Status status = ValidateFrame(f, either);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("dtype is DTYPE_FLOAT16, expected DTYPE_FLOAT32 or DTYPE_BFLOAT16"),
            std::string::npos)
      << status;
}

// The split head's frames: only between the last two stages of a job whose
// head is split, each at its shape and in float32 (HEAD_INPUT as a hidden
// state), never over NCCL.
TEST(FrameValidatorTest, HeadFramesPassOnlyBetweenTheStagesSharingTheHeadAtTheirShapes) {
  const auto head_frame = [](v1::TensorFrame::Kind kind, int from,
                             std::vector<int64_t> shape) {
    v1::TensorFrame f = Activation(0);
    f.set_kind(kind);
    f.set_from_stage(from);
    f.clear_shape();
    int64_t elements = 1;
    for (int64_t d : shape) {
      f.add_shape(d);
      elements *= d;
    }
    f.set_data(std::string(elements * 4, '\0'));
    return f;
  };
  LinkExpectations before = Expect();  // stage 1 of 3: the stage before the last
  before.head_rows = 5;
  LinkExpectations last = before;
  last.stage = 2;
  EXPECT_TRUE(ValidateFrame(head_frame(v1::TensorFrame::HEAD_INPUT, 2, {2, 3, 4}), before).ok());
  EXPECT_TRUE(ValidateFrame(head_frame(v1::TensorFrame::HEAD_SCALE, 2, {6}), before).ok());
  EXPECT_TRUE(ValidateFrame(head_frame(v1::TensorFrame::HEAD_PART, 1, {6, 10}), last).ok());
  EXPECT_TRUE(ValidateFrame(head_frame(v1::TensorFrame::HEAD_ROWS, 1, {5, 4}), last).ok());
  const auto refused = [](const v1::TensorFrame& f, const LinkExpectations& e,
                          const std::string& fragment) {
    const absl::Status status = ValidateFrame(f, e);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << fragment;
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  };
  // No split: none of them.
  refused(head_frame(v1::TensorFrame::HEAD_INPUT, 2, {2, 3, 4}), Expect(), "does not share");
  // To the wrong stage of the two.
  refused(head_frame(v1::TensorFrame::HEAD_PART, 0, {6, 10}), before, "does not share");
  refused(head_frame(v1::TensorFrame::HEAD_SCALE, 1, {6}), last, "does not share");
  // Another shape; another type.
  refused(head_frame(v1::TensorFrame::HEAD_SCALE, 2, {7}), before, "shape is [7], expected [6]");
  refused(head_frame(v1::TensorFrame::HEAD_ROWS, 1, {4, 4}), last, "expected [5, 4]");
  v1::TensorFrame bf16 = head_frame(v1::TensorFrame::HEAD_PART, 1, {6, 10});
  bf16.set_dtype(v1::DTYPE_BFLOAT16);
  refused(bf16, last, "expected DTYPE_FLOAT32");
  v1::TensorFrame nccl = head_frame(v1::TensorFrame::HEAD_PART, 1, {6, 10});
  nccl.set_payload_on_nccl(true);
  nccl.clear_data();
  refused(nccl, last, "carry their tensor in data");
}

// The head's frames have a queue of their own: one the last stage waits for
// gets in while the activations' queue is full.
TEST(InboxTest, AHeadFrameGetsInPastAFullQueueOfActivations) {
  Inbox inbox(1);
  ASSERT_TRUE(inbox.Push(Inbox::From::kPrevious, Activation(0)));
  v1::TensorFrame part = Activation(0);
  part.set_kind(v1::TensorFrame::HEAD_PART);
  std::thread pusher([&] { EXPECT_TRUE(inbox.Push(Inbox::From::kPrevious, part)); });
  pusher.join();  // would block for good behind the activation
  EXPECT_EQ(inbox.PeekKind(Inbox::From::kHead), v1::TensorFrame::HEAD_PART);
  EXPECT_EQ(inbox.PeekKind(Inbox::From::kPrevious), v1::TensorFrame::ACTIVATION);
  inbox.WaitFor(Inbox::From::kHead, absl::Seconds(10));
  EXPECT_TRUE(inbox.Pop(Inbox::From::kHead).has_value());
  EXPECT_FALSE(inbox.Pop(Inbox::From::kHead).has_value());
}

TEST(FrameValidatorTest, NcclFramesCarryIdsOrNoData) {
  v1::TensorFrame ids;
  ids.set_kind(v1::TensorFrame::NCCL_IDS);
  ids.set_job_name("job");
  ids.set_from_stage(0);
  ids.set_data(std::string(kNcclIdsBytes, 'x'));
  EXPECT_TRUE(ValidateFrame(ids, Expect()).ok());
  ids.set_data("short");
  ExpectRefused(ids, "NCCL ids take 256 bytes");

  v1::TensorFrame header = Activation(0);
  header.clear_data();
  header.set_payload_on_nccl(true);
  EXPECT_TRUE(ValidateFrame(header, Expect()).ok());
  header.set_data("x");
  ExpectRefused(header, "comes over NCCL carries no data");
  header.clear_data();
  header.set_shape(0, 9);
  ExpectRefused(header, "shape is [9, 3, 4]");
}

TEST(FrameValidatorTest, RefusesWrongShapeDtypeSizeSenderJobAndKind) {
  v1::TensorFrame f = Activation(0);
  f.set_shape(2, 5);
  ExpectRefused(f, "shape is [2, 3, 5], expected [2, 3, 4]");
  f = Activation(0);
  f.set_dtype(v1::DTYPE_BFLOAT16);
  ExpectRefused(f, "dtype is DTYPE_BFLOAT16, expected DTYPE_FLOAT32");
  f = Activation(0);
  f.mutable_data()->pop_back();
  ExpectRefused(f, "data has 95 bytes, shape and dtype need 96");
  f = Activation(0);
  f.set_from_stage(2);  // an activation must come from the previous stage
  ExpectRefused(f, "from_stage must be 0");
  f = Activation(0);
  f.set_job_name("other");
  ExpectRefused(f, "job_name is \"other\"");
  f = Activation(0);
  f.set_kind(static_cast<v1::TensorFrame::Kind>(42));
  ExpectRefused(f, "not a known frame kind");
  f = Activation(0);
  f.set_kind(v1::TensorFrame::SHUTDOWN);
  ExpectRefused(f, "control frame carries no tensor");
}

// A client stream of StageLink.Push carrying `secret`.
struct Stream {
  grpc::ClientContext context;
  v1::PushSummary summary;
  std::unique_ptr<grpc::ClientWriter<v1::TensorFrame>> writer;
};
std::unique_ptr<Stream> OpenStream(v1::StageLink::Stub& stub, const std::string& secret,
                                   const std::string& run = "",
                                   absl::Duration deadline = absl::InfiniteDuration()) {
  auto stream = std::make_unique<Stream>();
  if (deadline != absl::InfiniteDuration()) {
    stream->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  }
  if (!secret.empty()) stream->context.AddMetadata(kLinkSecretMetadata, secret);
  if (!run.empty()) stream->context.AddMetadata(kLinkRunMetadata, run);
  stream->writer = stub.Push(&stream->context, &stream->summary);
  return stream;
}

// A real StageLink server on 127.0.0.1:0 feeding an Inbox.
class StageLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<StageLinkService>();
    service_->Attach(Expect(), inbox_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port_, 0);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    inbox_->Close();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>(2);  // small: flow control
  std::unique_ptr<StageLinkService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
};

TEST_F(StageLinkTest, FramesArriveInOrderThroughABoundedInbox) {
  absl::Status failure;
  PeerSender::Options options;
  options.address = address_;
  options.peer_name = "stage 1";
  options.secret = kSecret;
  PeerSender sender(options, [&](absl::Status s) { failure = s; });
  sender.Start();
  for (uint64_t id = 0; id < 6; ++id) ASSERT_TRUE(sender.Send(Activation(id)));
  v1::TensorFrame shutdown;
  shutdown.set_kind(v1::TensorFrame::SHUTDOWN);
  shutdown.set_job_name("job");
  shutdown.set_from_stage(0);
  ASSERT_TRUE(sender.Send(shutdown));
  // The inbox holds 2; the rest wait in the sender and in gRPC until we pop.
  for (uint64_t id = 0; id < 6; ++id) {
    std::optional<v1::TensorFrame> frame;
    while (!(frame = inbox_->Pop(Inbox::From::kPrevious))) inbox_->Wait(absl::Seconds(10));
    EXPECT_EQ(frame->micro_batch_id(), id);
  }
  inbox_->Wait(absl::Seconds(10));
  EXPECT_EQ(inbox_->PeekKind(Inbox::From::kPrevious), v1::TensorFrame::SHUTDOWN);
  EXPECT_TRUE(sender.Close(absl::Seconds(10)).ok());
  EXPECT_TRUE(failure.ok()) << failure;
  EXPECT_EQ(sender.bytes_sent(), 6 * 96);
  EXPECT_TRUE(inbox_->failure().ok()) << inbox_->failure();
}

TEST_F(StageLinkTest, AMalformedFrameIsRefusedAndNeverQueued) {
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto stub = v1::StageLink::NewStub(channel);
  grpc::ClientContext context;
  context.AddMetadata(kLinkSecretMetadata, kSecret);
  v1::PushSummary summary;
  auto writer = stub->Push(&context, &summary);
  v1::TensorFrame bad = Activation(0);
  bad.set_shape(0, 1000);
  writer->Write(bad);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("shape is [1000, 3, 4]"), std::string::npos);
  EXPECT_FALSE(inbox_->PeekKind(Inbox::From::kPrevious).has_value());
  EXPECT_EQ(service_->frames_rejected(), 1);
}

// A neighbour has one stream: a second from the same stage (a copy of its
// secret in other hands, or a confused sender) is refused at its first frame.
TEST_F(StageLinkTest, ASecondStreamFromTheSameNeighbourIsRefusedAndNeverQueued) {
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto stub = v1::StageLink::NewStub(channel);
  std::unique_ptr<Stream> first = OpenStream(*stub, kSecret);
  ASSERT_TRUE(first->writer->Write(Activation(0)));
  std::optional<v1::TensorFrame> frame;
  while (!(frame = inbox_->Pop(Inbox::From::kPrevious))) inbox_->Wait(absl::Seconds(10));
  EXPECT_EQ(frame->micro_batch_id(), 0u);

  std::unique_ptr<Stream> second = OpenStream(*stub, kSecret);
  second->writer->Write(Activation(1));
  second->writer->WritesDone();
  const grpc::Status refused = second->writer->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(refused.error_message().find("stage 0 already has its stream to stage 1"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(second->summary.frames_received(), 0);
  EXPECT_EQ(service_->frames_rejected(), 1);

  // The first stream carries on, and nothing of the second was queued.
  ASSERT_TRUE(first->writer->Write(Activation(2)));
  while (!(frame = inbox_->Pop(Inbox::From::kPrevious))) inbox_->Wait(absl::Seconds(10));
  EXPECT_EQ(frame->micro_batch_id(), 2u);
  EXPECT_TRUE(inbox_->failure().ok()) << inbox_->failure();
  first->writer->WritesDone();
  EXPECT_TRUE(first->writer->Finish().ok());
}

// A stranger on the port, even with well-formed frames of the right job and
// sender, is refused before its first frame and cannot fail the stage.
TEST_F(StageLinkTest, AStreamWithoutTheAttemptsSecretIsRefusedAndHarmsNothing) {
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto stub = v1::StageLink::NewStub(channel);
  for (const char* secret : {"", "0123456789abcdef0123456789abcdee", "short"}) {
    grpc::ClientContext context;
    if (*secret != '\0') context.AddMetadata(kLinkSecretMetadata, secret);
    v1::PushSummary summary;
    auto writer = stub->Push(&context, &summary);
    writer->Write(Activation(0));
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << secret;
    EXPECT_NE(status.error_message().find("not a peer of this attempt"), std::string::npos);
    EXPECT_EQ(summary.frames_received(), 0);
  }
  EXPECT_EQ(service_->frames_rejected(), 3);
  EXPECT_FALSE(inbox_->PeekKind(Inbox::From::kPrevious).has_value());
  EXPECT_TRUE(inbox_->failure().ok()) << inbox_->failure();
}

// A worker's StageLinkService with no stage attached, served on 127.0.0.1.
class StageLinkWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = v1::StageLink::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  StageLinkService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::StageLink::Stub> stub_;
};

// Streams that open before a stage is attached wait for it, but only a few:
// strangers on an idle worker's port cannot take every thread of its server.
TEST_F(StageLinkWaitTest, OnlyAFewStreamsWaitForAStageMoreAreRefusedAtOnce) {
  std::vector<std::unique_ptr<Stream>> waiting;
  for (int i = 0; i < StageLinkService::kMaxWaitingStreams; ++i) {
    waiting.push_back(OpenStream(*stub_, kSecret));
  }
  ASSERT_TRUE(service_.AwaitWaitingStreams(StageLinkService::kMaxWaitingStreams, absl::Seconds(10)));
  ASSERT_EQ(service_.waiting_streams(), StageLinkService::kMaxWaitingStreams);
  // One more is refused at once (a waiting one would end UNAVAILABLE after 30 s, or be taken).
  grpc::ClientContext context;
  v1::PushSummary summary;
  auto writer = stub_->Push(&context, &summary);
  writer->WritesDone();
  const grpc::Status crowded = writer->Finish();
  EXPECT_EQ(crowded.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(crowded.error_message().find("4 streams already wait"), std::string::npos)
      << crowded.error_message();
  // The stage arrives: the waiting streams are taken, as a neighbour's would be.
  auto inbox = std::make_shared<Inbox>(8);
  service_.Attach(Expect(), inbox);
  for (auto& stream : waiting) {
    stream->writer->WritesDone();
    EXPECT_TRUE(stream->writer->Finish().ok());
  }
  EXPECT_EQ(service_.waiting_streams(), 0);
  inbox->Close();
}

// The stage this worker is ending, and the one a neighbour's stream is for.
struct HandOver {
  std::string name;
  std::string job;   // the ending stage's job, at attempt 1
  std::string next;  // the stream's run
};

// A neighbour can reach this worker while its stage of another run is still
// ending: a job restarts (attempt 2's neighbour) or one job ends and the next
// is placed at once (the next job's stage 0, on a worker that was free). Its
// stream waits for its own stage instead of being refused (which failed that
// attempt, or hung it when the refusal came after the frames the sender had
// written); a stream naming the ending run, an earlier attempt of its job or
// no run id is still refused at once, and nothing reaches the ending stage.
class StageLinkHandOverTest : public StageLinkWaitTest,
                              public ::testing::WithParamInterface<HandOver> {};

TEST_P(StageLinkHandOverTest, AStreamOfTheNextRunWaitsWhileThisWorkersStageEnds) {
  constexpr char kNextSecret[] = "fedcba9876543210fedcba9876543210";
  const std::string job = GetParam().job, next_run = GetParam().next;
  LinkExpectations ending = Expect();
  ending.job_name = job + "/1";
  auto ending_inbox = std::make_shared<Inbox>(8);
  service_.Attach(ending, ending_inbox);

  std::unique_ptr<Stream> next = OpenStream(*stub_, kNextSecret, next_run);
  ASSERT_TRUE(service_.AwaitWaitingStreams(1, absl::Seconds(10)));
  for (const std::string& run : {job + "/1", job + "/0", job, job + "/x"}) {
    // At once: one made to wait would pass its deadline long before the 30 s.
    std::unique_ptr<Stream> stranger = OpenStream(*stub_, kNextSecret, run, absl::Seconds(10));
    stranger->writer->WritesDone();
    const grpc::Status refused = stranger->writer->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << run;
  }
  EXPECT_EQ(service_.waiting_streams(), 1);

  // The ending stage goes, the next run's arrives: the waiting stream is its.
  service_.Detach();
  LinkExpectations expect = Expect();
  expect.job_name = next_run;
  expect.secret = kNextSecret;
  auto next_inbox = std::make_shared<Inbox>(8);
  service_.Attach(expect, next_inbox);
  next->writer->WaitForInitialMetadata();  // accepted, as PeerSender waits for it
  const auto& accepted = next->context.GetServerInitialMetadata();
  EXPECT_NE(accepted.find(kLinkAcceptedMetadata), accepted.end());
  v1::TensorFrame frame = Activation(7);
  frame.set_job_name(next_run);
  ASSERT_TRUE(next->writer->Write(frame));
  std::optional<v1::TensorFrame> got;
  while (!(got = next_inbox->Pop(Inbox::From::kPrevious))) next_inbox->Wait(absl::Seconds(10));
  EXPECT_EQ(got->micro_batch_id(), 7u);
  v1::TensorFrame shutdown;
  shutdown.set_kind(v1::TensorFrame::SHUTDOWN);
  shutdown.set_job_name(next_run);
  shutdown.set_from_stage(0);
  ASSERT_TRUE(next->writer->Write(shutdown));
  next->writer->WritesDone();
  EXPECT_TRUE(next->writer->Finish().ok());
  EXPECT_EQ(service_.waiting_streams(), 0);
  EXPECT_FALSE(ending_inbox->PeekKind(Inbox::From::kPrevious).has_value());
  EXPECT_TRUE(ending_inbox->failure().ok()) << ending_inbox->failure();
  EXPECT_TRUE(next_inbox->failure().ok()) << next_inbox->failure();
  next_inbox->Close();
}

INSTANTIATE_TEST_SUITE_P(RestartAndNextJob, StageLinkHandOverTest,
                         ::testing::Values(HandOver{"NextAttempt", "job", "job/2"},
                                           HandOver{"NextJob", "before", "next/1"}),
                         [](const ::testing::TestParamInfo<HandOver>& info) {
                           return info.param.name;
                         });

TEST(RunIdTest, ANextRunIsALaterAttemptOfTheSameJobOrAnyAttemptOfAnother) {
  EXPECT_TRUE(MayBeNextRun("job/2", "job/1"));
  EXPECT_TRUE(MayBeNextRun("a/b/10", "a/b/9"));
  EXPECT_TRUE(MayBeNextRun("other/1", "job/1"));
  EXPECT_TRUE(MayBeNextRun("jobs/1", "job/2"));
  EXPECT_TRUE(MayBeNextRun("job/1", "a/job/7"));
  EXPECT_FALSE(MayBeNextRun("job/1", "job/1"));  // the attached run itself
  EXPECT_FALSE(MayBeNextRun("job/1", "job/2"));  // an earlier attempt
  EXPECT_FALSE(MayBeNextRun("job/x", "job/1"));  // no run ids
  EXPECT_FALSE(MayBeNextRun("job", "job/1"));
  EXPECT_FALSE(MayBeNextRun("/2", "job/1"));
  EXPECT_FALSE(MayBeNextRun("", "job/1"));
  EXPECT_FALSE(MayBeNextRun("job/2", "job"));
}

TEST_F(StageLinkTest, APeerThatVanishesMidTrainingFailsTheInbox) {
  {
    auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    auto stub = v1::StageLink::NewStub(channel);
    grpc::ClientContext context;
    context.AddMetadata(kLinkSecretMetadata, kSecret);
    v1::PushSummary summary;
    auto writer = stub->Push(&context, &summary);
    ASSERT_TRUE(writer->Write(Activation(0)));
    while (!inbox_->Pop(Inbox::From::kPrevious)) inbox_->Wait(absl::Seconds(10));
    context.TryCancel();  // as a killed process would
    writer->Finish();
  }
  for (int i = 0; i < 100 && inbox_->failure().ok(); ++i) inbox_->Wait(absl::Milliseconds(100));
  EXPECT_EQ(inbox_->failure().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(inbox_->failure().message().find("stage 0 closed its link to stage 1"),
            std::string::npos);
}

// A peer that refuses the stream (here: the wrong link secret) fails the link
// at once with its reason, with no frame sent: before, the refusal surfaced
// only at a write after it, and two stages each waiting for the other's
// frames waited forever.
TEST_F(StageLinkTest, ARefusedLinkFailsAtOnceNamingTheReasonBeforeAnyFrame) {
  absl::Notification failed;
  absl::Status failure;
  PeerSender::Options options;
  options.address = address_;
  options.peer_name = "stage 1";
  options.secret = "not the secret of this attempt...";
  PeerSender sender(options, [&](absl::Status s) {
    failure = s;
    failed.Notify();
  });
  sender.Start();
  ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failure.message().find("stage 1 at " + address_ + " refused the link"),
            std::string::npos)
      << failure;
  EXPECT_NE(failure.message().find("not a peer of this attempt"), std::string::npos) << failure;
  EXPECT_FALSE(sender.Send(Activation(0)));
  EXPECT_FALSE(inbox_->PeekKind(Inbox::From::kPrevious).has_value());
}

TEST(PeerSenderTest, AnUnreachablePeerIsReportedNamingIt) {
  absl::Notification failed;
  absl::Status failure;
  // Port 1 on loopback: nothing listens there.
  PeerSender::Options options;
  options.address = "127.0.0.1:1";
  options.peer_name = "stage 2";
  options.capacity = 4;
  options.connect_timeout = absl::Milliseconds(300);
  PeerSender sender(options,
                    [&](absl::Status s) {
                      failure = s;
                      failed.Notify();
                    });
  sender.Start();
  ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failure.message().find("cannot reach stage 2 at 127.0.0.1:1"), std::string::npos);
  EXPECT_FALSE(sender.Send(Activation(0)));
}

}  // namespace
}  // namespace paci
