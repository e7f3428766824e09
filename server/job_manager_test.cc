#include "server/job_manager.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

// The SQLite store behind a gate: a write blocks while the gate is closed (a
// slow disk), or fails while `failing` is set (a full one).
class GatedStore : public JobStore {
 public:
  explicit GatedStore(JobStore& store) : store_(store) {}

  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Waits until a write is blocked at the closed gate.
  bool AwaitBlockedPut(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto blocked = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return blocked_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&blocked), timeout);
  }
  void Fail(bool failing) {
    absl::MutexLock lock(&mu_);
    failing_ = failing;
  }

  absl::Status Apply(const std::vector<v1::Job>& puts,
                     const std::vector<std::string>& deletes) override {
    {
      absl::MutexLock lock(&mu_);
      if (failing_) return absl::UnavailableError("disk full");
      puts_ += static_cast<int>(puts.size());
      deletes_ += static_cast<int>(deletes.size());
      ++blocked_;
      mu_.Await(absl::Condition(&open_));
      --blocked_;
    }
    return store_.Apply(puts, deletes);
  }
  absl::StatusOr<std::vector<v1::Job>> List() const override { return store_.List(); }
  // Every job written, and every one removed.
  int puts() {
    absl::MutexLock lock(&mu_);
    return puts_;
  }
  int deletes() {
    absl::MutexLock lock(&mu_);
    return deletes_;
  }

 private:
  JobStore& store_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
  int puts_ ABSL_GUARDED_BY(mu_) = 0;
  int deletes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A JobManager on a real SQLite file, with a hand-driven clock and workers
// whose messages are collected instead of sent.
class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = (std::filesystem::path(testing::TempDir()) /
           (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".db"))
              .string();
    std::filesystem::remove(db_);
    Restart();
  }
  // The database file goes with the test (and SQLite's files beside it).
  void TearDown() override {
    manager_.reset();
    gated_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(db_ + suffix);
  }

  // A new manager on the same database file, as after kill -9.
  void Restart() {
    inbox_.clear();  // what the old manager sent is gone with it
    manager_.reset();
    gated_.reset();
    store_.reset();
    store_ = *SqliteJobStore::Open(db_);
    gated_ = std::make_unique<GatedStore>(*store_);
    manager_ = std::make_unique<JobManager>(*gated_, metrics_, options_, clock_);
    ASSERT_TRUE(manager_->Recover().ok());
  }

  static v1::JobSpec Spec(const std::string& name, int P = 2) {
    v1::JobSpec spec = *ParseJobSpecYaml(
        "name: " + name +
        "\nmodel: {vocab_size: 80, num_layers: 4, d_model: 32, num_heads: 4, seq_len: 16}"
        "\npipeline: {num_stages: " + std::to_string(P) + ", accumulation: 2, micro_batch_size: 2}"
        "\noptimizer: {lr: 0.001}\ntraining: {steps: 10}\ndata: {corpus_path: /c.txt}"
        "\ncheckpoint: {directory: /ckpt, interval: 5}\n");
    ApplyJobSpecDefaults(&spec);
    return spec;
  }

  // A worker registering, placed on the jobs of namespace `name_space` ("": of none), as
  // the gateway finds from its certificate.
  absl::Status TryConnect(const std::string& id, const std::map<std::string, std::string>& labels,
                          const v1::StageAssignment& running, const std::string& name_space) {
    v1::WorkerRegistration r;
    r.set_worker_id(id);
    r.set_link_address(id + ":1");
    r.set_store_address(id + ":2");
    for (const auto& [k, v] : labels) (*r.mutable_labels())[k] = v;
    *r.mutable_running() = running;
    return manager_->Connect(
        r, [this, id](const v1::CoordinatorMessage& m) { inbox_[id].push_back(m); }, name_space);
  }
  void ConnectWorker(const std::string& id, std::map<std::string, std::string> labels = {},
                     v1::StageAssignment running = {}, const std::string& name_space = "") {
    ASSERT_TRUE(TryConnect(id, labels, running, name_space).ok());
  }

  v1::StageReport Report(const std::string& job, int64_t attempt, int stage, int64_t steps) {
    v1::StageReport r;
    r.set_job_name(job);
    r.set_attempt(attempt);
    r.set_stage(stage);
    r.set_optimizer_steps(steps);
    return r;
  }

  v1::JobPhase Phase(const std::string& job) { return manager_->Get(job)->status().phase(); }

  // What a worker placed on that stage of the job's attempt names when it
  // registers again (WorkerRegistration.running).
  v1::StageAssignment Placement(const std::string& job, int64_t attempt, int stage,
                                int replica = 0) {
    v1::StageAssignment placement;
    placement.set_job_name(job);
    placement.set_attempt(attempt);
    placement.set_stage(stage);
    placement.set_replica(replica);
    *placement.mutable_job_create_time() = manager_->Get(job)->status().create_time();
    return placement;
  }

  // The registry in the text exposition format, as Prometheus scrapes it.
  std::string Exposition() {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  }

  std::vector<v1::CoordinatorMessage> Take(const std::string& worker) {
    return std::exchange(inbox_[worker], {});
  }

  std::string db_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  JobManagerOptions options_;
  FakeClock clock_{absl::FromUnixSeconds(1'000'000)};
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<GatedStore> gated_;
  std::unique_ptr<JobManager> manager_;
  std::map<std::string, std::vector<v1::CoordinatorMessage>> inbox_;
};

TEST_F(JobManagerTest, SubmitIsIdempotentOnTheNameAndRefusesAnotherSpec) {
  auto first = manager_->Submit(Spec("a"));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->status().phase(), v1::QUEUED);
  auto again = manager_->Submit(Spec("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(manager_->List(v1::JOB_PHASE_UNSPECIFIED).size(), 1u);
  v1::JobSpec other = Spec("a");
  other.mutable_training()->set_steps(99);
  EXPECT_EQ(manager_->Submit(other).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(JobManagerTest, AJobStartsOnlyWhenAllItsStagesHaveWorkers) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  EXPECT_EQ(Phase("a"), v1::QUEUED);
  EXPECT_TRUE(Take("w1").empty());
  ConnectWorker("w2");
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  auto m1 = Take("w1"), m2 = Take("w2");
  ASSERT_EQ(m1.size(), 1u);
  ASSERT_EQ(m2.size(), 1u);
  EXPECT_EQ(m1[0].assign().stage(), 0);
  EXPECT_EQ(m2[0].assign().stage(), 1);
  EXPECT_EQ(m1[0].assign().attempt(), 1);
  EXPECT_EQ(m1[0].assign().stage_addresses(1), "w2:1");
  EXPECT_FALSE(m1[0].assign().spec().checkpoint().resume());
}

TEST_F(JobManagerTest, ProgressIsAggregatedAndAllFinishedStagesSucceedTheJob) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  v1::StageReport r0 = Report("a", 1, 0, 6), r1 = Report("a", 1, 1, 4);
  r1.add_train_loss()->set_loss(2.5);
  r1.add_checkpoint_steps(5);
  r0.add_checkpoint_steps(5);
  manager_->OnReport("w1", r0);
  manager_->OnReport("w2", r1);
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().step(), 4);
  EXPECT_DOUBLE_EQ(job.status().train_loss(), 2.5);
  EXPECT_EQ(job.status().checkpoint_step(), 5);
  r0.set_finished(true);
  manager_->OnReport("w1", r0);
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  r1.set_finished(true);
  manager_->OnReport("w2", r1);
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  EXPECT_TRUE(manager_->Get("a")->status().has_completion_time());
}

TEST_F(JobManagerTest, ASecondJobWaitsForTheFirstsWorkers) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ASSERT_TRUE(manager_->Submit(Spec("b")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_EQ(Phase("b"), v1::QUEUED);
  for (auto [w, s] : {std::pair{"w1", 0}, std::pair{"w2", 1}}) {
    v1::StageReport r = Report("a", 1, s, 10);
    r.set_finished(true);
    manager_->OnReport(w, r);
  }
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  EXPECT_EQ(Phase("b"), v1::RUNNING);
}

TEST_F(JobManagerTest, ALostWorkerRestartsTheJobFromItsCheckpointOnFreeWorkers) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  // Both stages of the attempt share one fresh link secret.
  auto first = Take("w1"), second = Take("w2");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  const std::string secret = first[0].assign().link_secret();
  EXPECT_EQ(secret.size(), 32u);
  EXPECT_EQ(second[0].assign().link_secret(), secret);
  manager_->Disconnect("w2");
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::RESTARTING);
  EXPECT_EQ(job.status().reason(), "WorkerLost");
  EXPECT_EQ(job.status().restarts(), 1);
  auto stop = Take("w1");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_TRUE(stop[0].has_stop());
  // w1 is busy until it reports the end of its stage; w3 arrives.
  ConnectWorker("w3");
  EXPECT_EQ(Phase("a"), v1::RESTARTING);
  v1::StageReport end = Report("a", 1, 0, 3);
  end.set_error("cancelled");
  end.set_error_code(static_cast<int>(absl::StatusCode::kCancelled));
  manager_->OnReport("w1", end);
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  auto assign = Take("w3");
  ASSERT_EQ(assign.size(), 1u);
  EXPECT_EQ(assign[0].assign().attempt(), 2);
  EXPECT_TRUE(assign[0].assign().spec().checkpoint().resume());
  // The new attempt's links take no stream of the old one's.
  EXPECT_EQ(assign[0].assign().link_secret().size(), 32u);
  EXPECT_NE(assign[0].assign().link_secret(), secret);
  // A late report of the dead attempt changes nothing.
  manager_->OnReport("w1", Report("a", 1, 0, 9));
  EXPECT_EQ(manager_->Get("a")->status().attempt(), 2);
}

// pipeline.elastic: a lost worker not replaced within the grace, and the job
// runs at the largest shape the workers left allow, from its checkpoint; when
// workers come back it grows at a checkpoint taken after the least interval.
TEST_F(JobManagerTest, AnElasticJobShrinksAfterItsGraceAndGrowsBackAtACheckpoint) {
  v1::JobSpec spec = Spec("e", 4);
  spec.mutable_training()->set_steps(100);  // checkpoints before the end
  v1::ElasticSpec* elastic = spec.mutable_pipeline()->mutable_elastic();
  elastic->set_min_stages(2);
  elastic->set_max_stages(4);
  elastic->set_grace_seconds(30);
  elastic->set_min_resize_interval_seconds(60);
  ApplyJobSpecDefaults(&spec);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  for (const char* w : {"w0", "w1", "w2", "w3"}) ConnectWorker(w);
  ASSERT_EQ(Phase("e"), v1::RUNNING);
  for (const char* w : {"w0", "w1", "w2", "w3"}) Take(w);
  // Each stage's end of an attempt that was stopped.
  auto ended = [&](const char* worker, int64_t attempt, int stage) {
    v1::StageReport end = Report("e", attempt, stage, 3);
    end.set_error("cancelled");
    end.set_error_code(static_cast<int>(absl::StatusCode::kCancelled));
    manager_->OnReport(worker, end);
  };
  manager_->Disconnect("w3");
  for (const char* w : {"w0", "w1", "w2"}) Take(w);  // stopped
  ended("w0", 1, 0);
  ended("w1", 1, 1);
  ended("w2", 1, 2);
  EXPECT_EQ(Phase("e"), v1::RESTARTING);  // 3 idle workers, 4 stages
  // Time passes; the workers left keep beating.
  auto advance = [&](absl::Duration by) {
    clock_.Advance(by);
    for (const char* w : {"w0", "w1", "w2", "w4"}) manager_->OnHeartbeat(w);
    manager_->Tick();
  };
  advance(absl::Seconds(29));
  EXPECT_EQ(Phase("e"), v1::RESTARTING);  // within the grace: the worker may come back
  advance(absl::Seconds(2));
  ASSERT_EQ(Phase("e"), v1::RUNNING);
  v1::Job job = *manager_->Get("e");
  EXPECT_EQ(job.spec().pipeline().num_stages(), 3);
  EXPECT_EQ(job.spec().pipeline().accumulation(), 2);  // the same global batch
  EXPECT_EQ(job.submitted_spec().pipeline().num_stages(), 4);
  EXPECT_EQ(job.status().resizes(), 1);
  const v1::JobCondition* resizing = nullptr;
  for (const v1::JobCondition& c : job.status().conditions()) {
    if (c.type() == "Resizing") resizing = &c;
  }
  ASSERT_NE(resizing, nullptr);
  EXPECT_FALSE(resizing->status());
  EXPECT_EQ(resizing->reason(), "Resized");
  EXPECT_NE(resizing->message().find("running at 3 stages x 1 replica"), std::string::npos)
      << resizing->message();
  for (const char* w : {"w0", "w1", "w2"}) {
    auto assign = Take(w);
    ASSERT_EQ(assign.size(), 1u) << w;
    EXPECT_EQ(assign[0].assign().attempt(), 2);
    EXPECT_EQ(assign[0].assign().spec().pipeline().num_stages(), 3);
    EXPECT_TRUE(assign[0].assign().spec().checkpoint().resume());
  }
  // Submitted again as it was written: the same job.
  EXPECT_TRUE(manager_->Submit(spec).ok());

  // w4 comes: no grow before a checkpoint, nor before the interval.
  ConnectWorker("w4");
  manager_->Tick();
  EXPECT_EQ(Phase("e"), v1::RUNNING);
  auto checkpoint = [&](int64_t step) {
    for (int stage = 0; stage < 3; ++stage) {
      v1::StageReport r = Report("e", 2, stage, step);
      r.add_checkpoint_steps(step);
      manager_->OnReport(std::string("w") + std::to_string(stage), r);
    }
    manager_->Tick();
  };
  checkpoint(5);
  EXPECT_EQ(Phase("e"), v1::RUNNING);  // 5 s after the last resize, 60 s apart
  advance(absl::Seconds(61));
  EXPECT_EQ(Phase("e"), v1::RUNNING);  // and it waits for a new checkpoint
  checkpoint(10);
  job = *manager_->Get("e");
  EXPECT_EQ(job.status().phase(), v1::RESTARTING);
  EXPECT_EQ(job.status().reason(), "Resizing");
  EXPECT_EQ(job.status().restarts(), 1);  // a resize is no failure
  bool resizing_now = false;
  for (const v1::JobCondition& c : job.status().conditions()) {
    if (c.type() != "Resizing") continue;
    resizing_now = c.status();
    EXPECT_EQ(c.reason(), "WorkersAvailable");
    EXPECT_NE(c.message().find("from 3 stages x 1 replica to 4 stages x 1 replica at step 10"),
              std::string::npos)
        << c.message();
  }
  EXPECT_TRUE(resizing_now);
  for (const char* w : {"w0", "w1", "w2"}) Take(w);  // stopped
  ended("w0", 2, 0);
  ended("w1", 2, 1);
  ended("w2", 2, 2);
  job = *manager_->Get("e");
  ASSERT_EQ(job.status().phase(), v1::RUNNING);
  EXPECT_EQ(job.spec().pipeline().num_stages(), 4);
  EXPECT_EQ(job.status().resizes(), 2);
  EXPECT_EQ(job.status().attempt(), 3);
  EXPECT_EQ(Take("w4").size(), 1u);
  const std::string metrics = Exposition();
  EXPECT_NE(metrics.find("paci_job_stages{training_job=\"e\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("paci_job_resizes_total{training_job=\"e\"} 2"), std::string::npos);
}

// An elastic job queued without its workers (pods that cannot all be placed)
// starts at the shape the workers there allow, a grace after it was submitted.
TEST_F(JobManagerTest, AnElasticJobQueuedWithoutItsWorkersStartsSmallerAfterItsGrace) {
  v1::JobSpec spec = Spec("q", 4);
  spec.mutable_pipeline()->mutable_elastic()->set_min_stages(2);
  spec.mutable_pipeline()->mutable_elastic()->set_max_stages(4);
  spec.mutable_pipeline()->mutable_elastic()->set_grace_seconds(30);
  ApplyJobSpecDefaults(&spec);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  ConnectWorker("w0");
  ConnectWorker("w1");
  auto advance = [&](absl::Duration by) {
    clock_.Advance(by);
    for (const char* w : {"w0", "w1"}) manager_->OnHeartbeat(w);
    manager_->Tick();
  };
  advance(absl::Seconds(29));
  EXPECT_EQ(Phase("q"), v1::QUEUED);  // its workers may still be starting
  advance(absl::Seconds(2));
  ASSERT_EQ(Phase("q"), v1::RUNNING);
  const v1::Job job = *manager_->Get("q");
  EXPECT_EQ(job.spec().pipeline().num_stages(), 2);
  EXPECT_EQ(job.status().resizes(), 1);
  EXPECT_EQ(job.status().attempt(), 1);
  EXPECT_EQ(Take("w0").size(), 1u);
  // A job without pipeline.elastic waits for its workers.
  ASSERT_TRUE(manager_->Submit(Spec("fixed", 2)).ok());
  advance(absl::Seconds(120));
  EXPECT_EQ(Phase("fixed"), v1::QUEUED);
}

TEST_F(JobManagerTest, ReplicasAreOneGangPlacedTogetherAndRestartedTogether) {
  v1::JobSpec spec = Spec("dp");  // P = 2
  spec.mutable_pipeline()->set_data_parallel(2);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  for (const char* w : {"w0", "w1", "w2"}) ConnectWorker(w);
  EXPECT_EQ(Phase("dp"), v1::QUEUED);  // 3 of the 4 workers it needs: nothing starts
  EXPECT_TRUE(Take("w0").empty());
  ConnectWorker("w3");
  ASSERT_EQ(Phase("dp"), v1::RUNNING);
  // Worker w runs stage w % P of replica w / P.
  std::vector<v1::StageAssignment> assigned;
  for (const char* w : {"w0", "w1", "w2", "w3"}) {
    auto messages = Take(w);
    ASSERT_EQ(messages.size(), 1u) << w;
    assigned.push_back(messages[0].assign());
  }
  const v1::StageAssignment& r1s1 = assigned[3];
  EXPECT_EQ(r1s1.stage(), 1);
  EXPECT_EQ(r1s1.replica(), 1);
  EXPECT_EQ(r1s1.stage_addresses(0), "w2:1");  // its own replica's pipeline
  EXPECT_EQ(r1s1.stage_addresses(1), "w3:1");
  EXPECT_EQ(r1s1.replica_store_address(), "w1:2");  // stage 1's replica 0 serves the store
  ASSERT_EQ(r1s1.replica_addresses_size(), 2);
  EXPECT_EQ(r1s1.replica_addresses(0), "w1:1");
  EXPECT_EQ(r1s1.replica_addresses(1), "w3:1");
  EXPECT_EQ(assigned[2].replica_store_address(), "w0:2");
  // Each stage's group has its own keys, ending in the attempt and stage.
  EXPECT_TRUE(absl::EndsWith(r1s1.replica_group(), "/dp/1/stage-1")) << r1s1.replica_group();
  EXPECT_NE(assigned[2].replica_group(), r1s1.replica_group());
  EXPECT_EQ(assigned[1].replica_group(), r1s1.replica_group());
  EXPECT_EQ(assigned[0].replica(), 0);
  const v1::Job running = *manager_->Get("dp");
  ASSERT_EQ(running.status().stages_size(), 4);
  EXPECT_EQ(running.status().stages(3).replica(), 1);
  EXPECT_EQ(running.status().stages(3).worker_id(), "w3");
  // Progress counts only when every replica's stage has it.
  for (int w = 0; w < 3; ++w) {
    v1::StageReport r = Report("dp", 1, w % 2, 5);
    r.set_replica(w / 2);
    manager_->OnReport(absl::StrCat("w", w), r);
  }
  EXPECT_EQ(manager_->Get("dp")->status().step(), 0);
  // One worker of one replica dies: the whole gang stops and the job restarts.
  manager_->Disconnect("w3");
  const v1::Job restarting = *manager_->Get("dp");
  EXPECT_EQ(restarting.status().phase(), v1::RESTARTING);
  EXPECT_NE(restarting.status().message().find("running stage 1 replica 1 is gone"),
            std::string::npos)
      << restarting.status().message();
  for (const char* w : {"w0", "w1", "w2"}) {
    auto stop = Take(w);
    ASSERT_EQ(stop.size(), 1u) << w;
    EXPECT_TRUE(stop[0].has_stop()) << w;
  }
}

TEST_F(JobManagerTest, MetricsLabelJobsTrainingJobAndSpellPhasesAsTheStatus) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  // A job that only waits has no series (a long queue adds none) ...
  EXPECT_EQ(Exposition().find("training_job=\"a\""), std::string::npos) << Exposition();
  ConnectWorker("w1");
  ConnectWorker("w2");
  // ... and the restart counter exists at 0 from the first placement, so
  // Prometheus sees the first restart as an increase.
  EXPECT_NE(Exposition().find("paci_job_restarts_total{training_job=\"a\"} 0"), std::string::npos)
      << Exposition();
  v1::StageReport r0 = Report("a", 1, 0, 6), r1 = Report("a", 1, 1, 4);
  r1.add_train_loss()->set_loss(2.5);
  manager_->OnReport("w1", r0);
  manager_->OnReport("w2", r1);
  std::string text = Exposition();
  EXPECT_NE(text.find("paci_job_step{training_job=\"a\"} 4"), std::string::npos) << text;
  EXPECT_NE(text.find("paci_job_train_loss{training_job=\"a\"} 2.5"), std::string::npos) << text;
  EXPECT_NE(text.find("paci_coordinator_jobs{phase=\"Running\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("paci_coordinator_jobs{phase=\"Failed\"} 0"), std::string::npos) << text;
  for (const char* label : {"{job=", ",job="}) {
    EXPECT_EQ(text.find(label), std::string::npos) << "no label named job: " << text;
  }
  manager_->Disconnect("w2");
  text = Exposition();
  EXPECT_NE(text.find("paci_job_restarts_total{training_job=\"a\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("paci_coordinator_jobs{phase=\"Restarting\"} 1"), std::string::npos) << text;
}

TEST_F(JobManagerTest, RestartsBeyondTheBackoffLimitFailTheJob) {
  v1::JobSpec spec = Spec("a");
  spec.mutable_run_policy()->set_backoff_limit(0);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  manager_->Disconnect("w2");
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::FAILED);
  EXPECT_EQ(job.status().reason(), "BackoffLimitExceeded");
  EXPECT_NE(job.status().message().find("worker w2 running stage 1 is gone"), std::string::npos);
}

TEST_F(JobManagerTest, MissedHeartbeatsMakeAWorkerDead) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  clock_.Advance(absl::Seconds(3));
  manager_->OnHeartbeat("w1");
  clock_.Advance(absl::Seconds(3));
  manager_->Tick();
  EXPECT_EQ(manager_->connected_workers(), 1u);
  EXPECT_EQ(Phase("a"), v1::RESTARTING);
  EXPECT_NE(manager_->Get("a")->status().message().find("no heartbeat"), std::string::npos);
}

TEST_F(JobManagerTest, ABadSpecOrCheckpointFailsTheJobWithoutRetrying) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  v1::StageReport r = Report("a", 1, 1, 0);
  r.set_error("checkpoint /ckpt/step-5 is corrupt");
  r.set_error_code(static_cast<int>(absl::StatusCode::kDataLoss));
  manager_->OnReport("w2", r);
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::FAILED);
  EXPECT_EQ(job.status().restarts(), 0);
  EXPECT_NE(job.status().message().find("is corrupt"), std::string::npos);
}

TEST_F(JobManagerTest, DeadlineAndStallAreReported) {
  v1::JobSpec spec = Spec("a");
  spec.mutable_run_policy()->set_active_deadline_seconds(600);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  clock_.Advance(absl::Seconds(200));
  manager_->OnHeartbeat("w1");
  manager_->OnReport("w2", Report("a", 1, 1, 3));
  manager_->Tick();
  bool stalled = false;
  const v1::Job job = *manager_->Get("a");
  for (const auto& c : job.status().conditions()) {
    if (c.type() == "Stalled" && c.status()) {
      stalled = true;
      EXPECT_NE(c.message().find("stage 0 on worker w1"), std::string::npos) << c.message();
    }
  }
  EXPECT_TRUE(stalled);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(100));
    manager_->OnHeartbeat("w1");
    manager_->OnHeartbeat("w2");
    manager_->Tick();
  }
  EXPECT_EQ(Phase("a"), v1::FAILED);
  EXPECT_EQ(manager_->Get("a")->status().reason(), "DeadlineExceeded");
}

TEST_F(JobManagerTest, ARunPolicyChangedWhileRunningAppliesFromThenOnAndIsStored) {
  v1::JobSpec spec = Spec("a");
  spec.mutable_run_policy()->set_backoff_limit(0);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(manager_->Get("a")->status().phase(), v1::RUNNING);
  v1::RunPolicy policy = spec.run_policy();
  policy.set_backoff_limit(1);
  absl::StatusOr<v1::Job> updated = manager_->UpdateRunPolicy("a", policy);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->spec().run_policy().backoff_limit(), 1);
  // A failure the old limit (0) would have ended the job on is a restart now.
  manager_->Disconnect("w2");
  EXPECT_EQ(manager_->Get("a")->status().phase(), v1::RESTARTING);
  // Kept across a restart of the coordinator.
  Restart();
  EXPECT_EQ(manager_->Get("a")->spec().run_policy().backoff_limit(), 1);

  // Refused: an unknown job, another worker selector, a finished job.
  EXPECT_EQ(manager_->UpdateRunPolicy("nope", policy).status().code(), absl::StatusCode::kNotFound);
  v1::RunPolicy elsewhere = policy;
  (*elsewhere.mutable_worker_selector())["pool"] = "gpu";
  absl::Status moved = manager_->UpdateRunPolicy("a", elsewhere).status();
  EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(moved.message(), "run_policy.worker_selector")) << moved;
  ASSERT_TRUE(manager_->Cancel("a").ok());
  absl::Status finished = manager_->UpdateRunPolicy("a", policy).status();
  EXPECT_EQ(finished.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(finished.message(), "has finished (Cancelled)")) << finished;
}

TEST_F(JobManagerTest, CancelStopsEveryStage) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  Take("w1");
  Take("w2");
  EXPECT_EQ(manager_->Cancel("a")->status().phase(), v1::CANCELLED);
  EXPECT_TRUE(Take("w1").at(0).has_stop());
  EXPECT_TRUE(Take("w2").at(0).has_stop());
  EXPECT_EQ(manager_->Cancel("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, WorkerSelectorPlacesOnlyOnLabelledWorkers) {
  v1::JobSpec spec = Spec("a", 1);
  (*spec.mutable_run_policy()->mutable_worker_selector())["job"] = "a";
  ASSERT_TRUE(manager_->Submit(spec).ok());
  ConnectWorker("plain");
  EXPECT_EQ(Phase("a"), v1::QUEUED);
  ConnectWorker("labelled", {{"job", "a"}});
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_TRUE(Take("plain").empty());
}

// A job labelled with a namespace runs on that namespace's workers only, whatever its
// selector says (a tenant's empty one, or one naming another namespace's job label); a
// job of no namespace on the workers of none (an administrator's, or without mutual TLS).
TEST_F(JobManagerTest, AJobRunsOnlyOnTheWorkersOfItsNamespaceWhateverItsSelector) {
  const std::map<std::string, std::string> team_a = {{"paci.dev/namespace", "team-a"}};
  ASSERT_TRUE(manager_->Submit(Spec("a", 1), team_a).ok());
  v1::JobSpec stray = Spec("stray", 1);
  (*stray.mutable_run_policy()->mutable_worker_selector())["paci.dev/job"] = "team-b.x";
  ASSERT_TRUE(manager_->Submit(stray, team_a).ok());
  // Team b's worker, even one carrying the label the stray job selects (and claiming team
  // a's namespace as a label of its own), takes neither; nor does a worker of no namespace.
  ConnectWorker("team-b.w0", {{"paci.dev/job", "team-b.x"}, {"paci.dev/namespace", "team-a"}}, {},
                "team-b");
  ConnectWorker("plain");
  EXPECT_EQ(Phase("a"), v1::QUEUED);
  EXPECT_EQ(Phase("stray"), v1::QUEUED);
  EXPECT_TRUE(Take("team-b.w0").empty());
  EXPECT_TRUE(Take("plain").empty());
  bool unschedulable = false;
  const v1::Job waiting = *manager_->Get("a");
  for (const auto& c : waiting.status().conditions()) {
    if (c.type() == "Unschedulable" && c.status()) {
      unschedulable = true;
      EXPECT_TRUE(absl::StrContains(c.message(), "namespace, team-a")) << c.message();
    }
  }
  EXPECT_TRUE(unschedulable);
  // Team a's worker runs team a's job.
  ConnectWorker("team-a.w0", {{"paci.dev/job", "team-a.a"}}, {}, "team-a");
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  auto assigned = Take("team-a.w0");
  ASSERT_EQ(assigned.size(), 1u);
  EXPECT_EQ(assigned[0].assign().job_name(), "a");
  EXPECT_EQ(Phase("stray"), v1::QUEUED);
  // A job of no namespace runs on the worker of none, never on team b's.
  ASSERT_TRUE(manager_->Submit(Spec("admins", 1)).ok());
  EXPECT_EQ(Phase("admins"), v1::RUNNING);
  EXPECT_EQ(manager_->Get("admins")->status().stages(0).worker_id(), "plain");
  EXPECT_TRUE(Take("team-b.w0").empty());
}

// A worker that names, when it registers, a stage of a job it could never have been placed
// on (another namespace's job; one whose selector it does not match) is refused, and the
// job is not held for it: it is placed as soon as its own workers come.
TEST_F(JobManagerTest, AWorkerClaimingAnotherNamespacesJobIsRefusedAndTheJobStillRuns) {
  v1::JobSpec spec = Spec("a", 1);
  (*spec.mutable_run_policy()->mutable_worker_selector())["paci.dev/job"] = "team-a.a";
  ASSERT_TRUE(manager_->Submit(spec, {{"paci.dev/namespace", "team-a"}}).ok());
  const v1::StageAssignment claim = Placement("a", 1, 0);
  const absl::Status stranger =
      TryConnect("team-b.w0", {{"paci.dev/job", "team-a.a"}}, claim, "team-b");
  EXPECT_EQ(stranger.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(stranger.message(),
                                "register.running.job_name: job \"a\" is not one this worker runs: "
                                "its certificate places it on the jobs of namespace team-b only"))
      << stranger.message();
  // Of the job's namespace, but not carrying what the job selects.
  const absl::Status unselected = TryConnect("team-a.w9", {}, claim, "team-a");
  EXPECT_EQ(unselected.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(unselected.message(), "does not carry the label paci.dev/job"))
      << unselected.message();
  EXPECT_EQ(manager_->connected_workers(), 0u);  // refused before anything changed
  EXPECT_TRUE(inbox_["team-b.w0"].empty());
  EXPECT_EQ(Phase("a"), v1::QUEUED);
  // A claim on an earlier job of that name (another create time) takes nothing: the
  // stranger is told to stop that stage, and the job does not wait for it.
  v1::StageAssignment earlier = claim;
  earlier.mutable_job_create_time()->set_seconds(claim.job_create_time().seconds() - 100);
  ConnectWorker("team-b.w1", {{"paci.dev/job", "team-b.b"}}, earlier, "team-b");
  auto told = Take("team-b.w1");
  ASSERT_EQ(told.size(), 1u);
  EXPECT_TRUE(told[0].has_stop());
  ConnectWorker("team-a.w0", {{"paci.dev/job", "team-a.a"}}, {}, "team-a");
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_EQ(manager_->Get("a")->status().stages(0).worker_id(), "team-a.w0");
}

// A claim on a job not (yet) submitted holds nothing: a job submitted later under that
// name is placed on its own workers, not kept waiting for the claimant to let go.
TEST_F(JobManagerTest, AClaimOnAJobNotYetSubmittedHoldsNothing) {
  v1::StageAssignment claim;
  claim.set_job_name("future");
  claim.set_attempt(1);
  ConnectWorker("team-b.w0", {}, claim, "team-b");
  auto told = Take("team-b.w0");
  ASSERT_EQ(told.size(), 1u);
  EXPECT_TRUE(told[0].has_stop());
  ASSERT_TRUE(manager_->Submit(Spec("future", 1), {{"paci.dev/namespace", "team-a"}}).ok());
  ConnectWorker("team-a.w0", {}, {}, "team-a");
  EXPECT_EQ(Phase("future"), v1::RUNNING);
  EXPECT_EQ(manager_->Get("future")->status().stages(0).worker_id(), "team-a.w0");
}

TEST_F(JobManagerTest, ARestartedCoordinatorKeepsItsJobsAndReconcilesRunningOnes) {
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ASSERT_TRUE(manager_->Submit(Spec("b", 1)).ok());
  v1::StageReport r = Report("a", 1, 1, 4);
  r.add_checkpoint_steps(5);
  manager_->OnReport("w2", r);
  Restart();
  ASSERT_EQ(manager_->List(v1::JOB_PHASE_UNSPECIFIED).size(), 2u);
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_EQ(Phase("b"), v1::QUEUED);
  // Both workers come back, saying what they run: no restart.
  ConnectWorker("w1", {}, Placement("a", 1, 0));
  ConnectWorker("w2", {}, Placement("a", 1, 1));
  clock_.Advance(absl::Seconds(30));
  manager_->OnHeartbeat("w1");
  manager_->OnHeartbeat("w2");
  manager_->Tick();
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::RUNNING);
  EXPECT_EQ(job.status().restarts(), 0);
  EXPECT_TRUE(Take("w1").empty());
}

// A coordinator killed after a stage's final report reached it but before it
// stored it (the store refuses here, as the kill would leave it) learns the
// report again: the worker names the stage it ran last when it registers and
// sends its final report again. A stage whose end was stored counts as back.
// The job succeeds with no restart.
TEST_F(JobManagerTest, FinalReportsARestartedCoordinatorMissedFinishTheJobWithoutARestart) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  v1::StageReport r0 = Report("a", 1, 0, 10), r1 = Report("a", 1, 1, 10);
  r0.set_finished(true);
  r1.set_finished(true);
  manager_->OnReport("w1", r0);
  gated_->Fail(true);
  manager_->OnReport("w2", r1);
  ASSERT_EQ(Phase("a"), v1::SUCCEEDED);  // in memory only
  Restart();
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_TRUE(manager_->Get("a")->status().stages(0).finished());
  EXPECT_FALSE(manager_->Get("a")->status().stages(1).finished());
  ConnectWorker("w2", {}, Placement("a", 1, 1));
  manager_->OnReport("w2", r1);
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  EXPECT_EQ(manager_->Get("a")->status().restarts(), 0);
  // w1, whose stage's end was stored, comes back late with the same report:
  // told that placement is over, and free for the next job.
  ConnectWorker("w1", {}, Placement("a", 1, 0));
  manager_->OnReport("w1", r0);
  EXPECT_TRUE(Take("w1").at(0).has_stop());
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  ASSERT_TRUE(manager_->Submit(Spec("b")).ok());
  EXPECT_EQ(Phase("b"), v1::RUNNING);
  EXPECT_TRUE(Take("w1").at(0).has_assign());
  clock_.Advance(absl::Seconds(30));  // past the reconnect grace
  manager_->OnHeartbeat("w1");
  manager_->OnHeartbeat("w2");
  manager_->Tick();
  Restart();
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  EXPECT_EQ(manager_->Get("a")->status().restarts(), 0);
}

// A job removed by retention and submitted again under its name is another
// job: a worker that comes back to a restarted coordinator naming the earlier
// one's placement (the same name and attempt) with its final report is told
// to stop, and the new job's stage is not taken as finished.
TEST_F(JobManagerTest, AFinalReportOfAnEarlierJobOfTheSameNameIsNotTakenForTheNewOne) {
  options_.retention.finished_jobs_to_keep = 0;
  Restart();
  ASSERT_TRUE(manager_->Submit(Spec("a", 1)).ok());
  ConnectWorker("w1");
  const v1::StageAssignment earlier = Take("w1").at(0).assign();
  v1::StageReport done = Report("a", 1, 0, 10);
  done.set_finished(true);
  manager_->OnReport("w1", done);
  ASSERT_FALSE(manager_->Get("a").ok()) << "removed by retention";
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(manager_->Submit(Spec("a", 1)).ok());
  ASSERT_EQ(Phase("a"), v1::RUNNING);  // placed on w1 as attempt 1 again
  Restart();                           // before w1 heard of it
  ConnectWorker("w1", {}, earlier);
  manager_->OnReport("w1", done);
  EXPECT_TRUE(Take("w1").at(0).has_stop());
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::RUNNING);
  EXPECT_FALSE(job.status().stages(0).finished());
  // The worker that does run it comes back: reconciled.
  manager_->Disconnect("w1");
  ConnectWorker("w1", {}, Placement("a", 1, 0));
  EXPECT_TRUE(Take("w1").empty());
  clock_.Advance(absl::Seconds(30));  // past the reconnect grace
  manager_->OnHeartbeat("w1");
  manager_->Tick();
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_EQ(manager_->Get("a")->status().restarts(), 0);
}

// A stage's failure a restarted coordinator did not store restarts the
// attempt once the worker, registering again, sends its final report again.
TEST_F(JobManagerTest, AFailureARestartedCoordinatorMissedRestartsTheAttempt) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  gated_->Fail(true);
  v1::StageReport failed = Report("a", 1, 1, 4);
  failed.set_error("stage 1: out of memory");
  failed.set_error_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
  manager_->OnReport("w2", failed);
  Restart();
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  ConnectWorker("w1", {}, Placement("a", 1, 0));
  ConnectWorker("w2", {}, Placement("a", 1, 1));
  manager_->OnReport("w2", failed);
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::RESTARTING);
  EXPECT_EQ(job.status().restarts(), 1);
  EXPECT_TRUE(absl::StrContains(job.status().message(), "out of memory")) << job.status().message();
}

// Messages go to the workers only once what led to them is stored: the
// assignment that follows a job's end waits for that end to be on disk (a
// worker stops repeating its last final report when it gets its next stage).
TEST_F(JobManagerTest, AnAssignmentIsSentOnlyOnceWhatLedToItIsStored) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ASSERT_TRUE(manager_->Submit(Spec("b")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  Take("w1");
  Take("w2");
  v1::StageReport r0 = Report("a", 1, 0, 10), r1 = Report("a", 1, 1, 10);
  r0.set_finished(true);
  r1.set_finished(true);
  manager_->OnReport("w1", r0);
  gated_->Close();
  std::thread reporter([&] { manager_->OnReport("w2", r1); });
  ASSERT_TRUE(gated_->AwaitBlockedPut(absl::Seconds(30)));
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  EXPECT_EQ(Phase("b"), v1::RUNNING);
  EXPECT_TRUE(inbox_["w1"].empty()) << "assigned before the write of a's end and b's placement";
  EXPECT_TRUE(inbox_["w2"].empty());
  gated_->Open();
  reporter.join();
  EXPECT_EQ(Take("w1").at(0).assign().job_name(), "b");
  EXPECT_EQ(Take("w2").at(0).assign().job_name(), "b");
  Restart();
  EXPECT_EQ(Phase("a"), v1::SUCCEEDED);
  EXPECT_EQ(Phase("b"), v1::RUNNING);
}

TEST_F(JobManagerTest, ARestartedCoordinatorReconcilesEveryReplicasWorkers) {
  v1::JobSpec spec = Spec("dp");  // P = 2, R = 2
  spec.mutable_pipeline()->set_data_parallel(2);
  for (const char* w : {"w0", "w1", "w2", "w3"}) ConnectWorker(w);
  ASSERT_TRUE(manager_->Submit(spec).ok());
  ASSERT_EQ(Phase("dp"), v1::RUNNING);
  Restart();
  v1::StageAssignment running = Placement("dp", 1, 0);
  // Each comes back saying which stage of which replica it runs; before the
  // last, one that claims the slot another worker was placed on is told to stop.
  for (int w = 0; w < 4; ++w) {
    running.set_stage(w % 2);
    running.set_replica(w / 2);
    if (w == 3) {
      ConnectWorker("impostor", {}, running);
      auto impostor = Take("impostor");
      ASSERT_EQ(impostor.size(), 1u);
      EXPECT_TRUE(impostor[0].has_stop());
    }
    ConnectWorker(absl::StrCat("w", w), {}, running);
  }
  // A worker that claims a replica the job does not have is told to stop.
  running.set_replica(2);
  ConnectWorker("stray", {}, running);
  auto stray = Take("stray");
  ASSERT_EQ(stray.size(), 1u);
  EXPECT_TRUE(stray[0].has_stop());
  v1::StageReport r = Report("dp", 1, 1, 7);
  r.set_replica(1);
  r.set_weights_hash(42);
  manager_->OnReport("w3", r);
  clock_.Advance(absl::Seconds(30));
  for (const char* w : {"w0", "w1", "w2", "w3"}) manager_->OnHeartbeat(w);
  manager_->Tick();
  const v1::Job job = *manager_->Get("dp");
  EXPECT_EQ(job.status().phase(), v1::RUNNING);
  EXPECT_EQ(job.status().restarts(), 0);
  EXPECT_EQ(job.status().stages(3).weights_hash(), 42u);  // replica 1's stage 1
  EXPECT_EQ(job.status().stages(3).optimizer_steps(), 7);
  EXPECT_EQ(job.status().stages(3).worker_id(), "w3");
  for (const char* w : {"w0", "w1", "w2", "w3"}) EXPECT_TRUE(Take(w).empty()) << w;
}

TEST_F(JobManagerTest, RunningJobsWhoseWorkersDoNotComeBackRestart) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  Restart();
  clock_.Advance(absl::Seconds(30));
  manager_->Tick();
  v1::Job job = *manager_->Get("a");
  EXPECT_EQ(job.status().phase(), v1::RESTARTING);
  EXPECT_EQ(job.status().reason(), "WorkersLost");
  ConnectWorker("w3");
  ConnectWorker("w4");
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_EQ(manager_->Get("a")->status().attempt(), 2);
}

TEST_F(JobManagerTest, AJobLargerThanThePoolDoesNotBlockSmallerOnes) {
  ASSERT_TRUE(manager_->Submit(Spec("big", 3)).ok());
  ASSERT_TRUE(manager_->Submit(Spec("small", 1)).ok());
  ConnectWorker("w1");
  EXPECT_EQ(Phase("small"), v1::RUNNING);
  v1::Job big = *manager_->Get("big");
  EXPECT_EQ(big.status().phase(), v1::QUEUED);
  bool unschedulable = false;
  for (const auto& c : big.status().conditions()) unschedulable |= c.type() == "Unschedulable";
  EXPECT_TRUE(unschedulable);
}

TEST_F(JobManagerTest, LossHistoryStaysBoundedAndKeepsTheLatestPoint) {
  ASSERT_TRUE(manager_->Submit(Spec("a", 1)).ok());
  ConnectWorker("w1");
  for (int64_t step = 1; step <= 25000; step += 100) {
    v1::StageReport r = Report("a", 1, 0, step + 99);
    for (int64_t s = step; s < step + 100; ++s) {
      auto* point = r.add_train_loss();
      point->set_step(s);
      point->set_loss(1.0);
    }
    manager_->OnReport("w1", r);
  }
  const v1::Job job = *manager_->Get("a");
  const auto& history = job.status().train_loss_history();
  EXPECT_LE(history.size(), 10000);
  EXPECT_GT(history.size(), 4000);
  EXPECT_EQ(history.rbegin()->step(), 25000);
  for (int i = 1; i < history.size(); ++i) EXPECT_LT(history[i - 1].step(), history[i].step());
}

TEST_F(JobManagerTest, WatchersWakeOnChange) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  const int64_t version = manager_->Get("a")->version();
  // Nothing changes: the wait ends when the manager's clock reaches its timeout.
  absl::StatusOr<v1::Job> same;
  std::thread watcher([&] { same = manager_->WaitForChange("a", version, absl::Seconds(10)); });
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));
  clock_.Advance(absl::Seconds(10));
  watcher.join();
  EXPECT_EQ(same->version(), version);
  ConnectWorker("w1");
  ConnectWorker("w2");
  auto changed = manager_->WaitForChange("a", version, absl::Seconds(5));
  EXPECT_GT(changed->version(), version);
  EXPECT_EQ(changed->status().phase(), v1::RUNNING);
}

// A slow disk must not stall the coordinator: while a store write blocks,
// heartbeats, reads and ticks go on, and no healthy worker is declared dead.
TEST_F(JobManagerTest, ABlockedStoreWriteStallsNoHeartbeat) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  gated_->Close();
  v1::StageReport r0 = Report("a", 1, 0, 5), r1 = Report("a", 1, 1, 5);
  r0.add_checkpoint_steps(5);
  r1.add_checkpoint_steps(5);
  // The reports name a checkpoint: stored at once, so the write blocks at the gate.
  std::thread reporter([&] {
    manager_->OnReport("w1", r0);
    manager_->OnReport("w2", r1);
  });
  ASSERT_TRUE(gated_->AwaitBlockedPut(absl::Seconds(30)));
  absl::Notification served;
  std::thread others([&] {
    for (int i = 0; i < 10; ++i) {
      clock_.Advance(absl::Seconds(1));  // 10 s: twice the heartbeat timeout
      manager_->OnHeartbeat("w1");
      manager_->OnHeartbeat("w2");
      manager_->Tick();
    }
    served.Notify();
  });
  const bool in_time = served.WaitForNotificationWithTimeout(absl::Seconds(30));
  gated_->Open();
  others.join();
  reporter.join();
  EXPECT_TRUE(in_time) << "heartbeats and ticks waited for the store";
  EXPECT_EQ(manager_->connected_workers(), 2u);
  EXPECT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_EQ(manager_->Get("a")->status().checkpoint_step(), 5);
  // What was written after the gate opened is the newest version.
  Restart();
  EXPECT_EQ(manager_->Get("a")->status().checkpoint_step(), 5);
}

// A worker's heartbeats wait on its stream behind its report while the store
// writes what that report changed: a slow disk must not make it a dead worker.
TEST_F(JobManagerTest, AWorkerWhoseReportWaitsForTheStoreIsNotDeclaredDead) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  gated_->Close();
  v1::StageReport r = Report("a", 1, 0, 5);
  r.add_checkpoint_steps(5);  // stored at once: the write blocks at the gate
  std::thread reporter([&] { manager_->OnReport("w1", r); });
  ASSERT_TRUE(gated_->AwaitBlockedPut(absl::Seconds(30)));
  absl::Notification ticked;
  std::thread ticker([&] {
    for (int i = 0; i < 10; ++i) {
      clock_.Advance(absl::Seconds(1));  // 10 s: twice the heartbeat timeout
      manager_->OnHeartbeat("w2");       // w1's wait behind its report
      manager_->Tick();                  // would block on the store, had it a restart to write
    }
    ticked.Notify();
  });
  const bool in_time = ticked.WaitForNotificationWithTimeout(absl::Seconds(30));
  const size_t connected = manager_->connected_workers();
  const v1::JobPhase phase = Phase("a");
  gated_->Open();
  ticker.join();
  reporter.join();
  EXPECT_TRUE(in_time) << "a tick had a change to store: w1 was declared dead";
  EXPECT_EQ(connected, 2u);
  EXPECT_EQ(phase, v1::RUNNING);
  // Heard from when the report was done; silent from then on, it is dead.
  manager_->Tick();
  EXPECT_EQ(manager_->connected_workers(), 2u);
  clock_.Advance(options_.heartbeat_timeout + absl::Seconds(1));
  manager_->OnHeartbeat("w2");
  manager_->Tick();
  EXPECT_EQ(manager_->connected_workers(), 1u);
  EXPECT_EQ(Phase("a"), v1::RESTARTING);
}

// A submission is acknowledged only once it is stored; a refused write leaves
// nothing behind, and the same name can be submitted again.
// A batch of writes the store refuses is counted and loses nothing already
// stored; the job's next change writes it again.
TEST_F(JobManagerTest, AFailedStoreWriteIsCountedAndWrittenAgainOnTheNextChange) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  EXPECT_NE(Exposition().find("paci_coordinator_store_errors_total 0"), std::string::npos);
  gated_->Fail(true);
  for (auto [w, s] : {std::pair{"w1", 0}, std::pair{"w2", 1}}) {
    v1::StageReport r = Report("a", 1, s, 5);
    r.add_checkpoint_steps(5);
    manager_->OnReport(w, r);
  }
  EXPECT_EQ(manager_->Get("a")->status().checkpoint_step(), 5);
  EXPECT_NE(Exposition().find("paci_coordinator_store_errors_total 2"), std::string::npos)
      << Exposition();
  // What was stored before is still there.
  absl::StatusOr<std::optional<v1::Job>> stored = store_->Get("a");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->status().phase(), v1::RUNNING);
  EXPECT_EQ((*stored)->status().checkpoint_step(), 0);
  gated_->Fail(false);
  for (auto [w, s] : {std::pair{"w1", 0}, std::pair{"w2", 1}}) {
    v1::StageReport r = Report("a", 1, s, 10);
    r.add_checkpoint_steps(10);
    manager_->OnReport(w, r);
  }
  Restart();
  EXPECT_EQ(manager_->Get("a")->status().checkpoint_step(), 10);
}

// A cancel is answered once it is stored: refused by the store, the client
// hears Unavailable (the job would run again after a restart), and cancelling
// again stores it.
TEST_F(JobManagerTest, ACancelTheStoreRefusesIsUnavailableAndCancellingAgainStoresIt) {
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  ConnectWorker("w1");
  ConnectWorker("w2");
  ASSERT_EQ(Phase("a"), v1::RUNNING);
  gated_->Fail(true);
  absl::StatusOr<v1::Job> refused = manager_->Cancel("a");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "the store refused to record it"))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "disk full")) << refused.status();
  EXPECT_EQ(Phase("a"), v1::CANCELLED);
  absl::StatusOr<std::optional<v1::Job>> stored = store_->Get("a");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->status().phase(), v1::RUNNING);
  gated_->Fail(false);
  absl::StatusOr<v1::Job> again = manager_->Cancel("a");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->status().phase(), v1::CANCELLED);
  Restart();
  EXPECT_EQ(Phase("a"), v1::CANCELLED);
}

TEST_F(JobManagerTest, ASubmissionTheStoreRefusesIsNotAccepted) {
  gated_->Fail(true);
  absl::StatusOr<v1::Job> refused = manager_->Submit(Spec("a"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("disk full"), absl::string_view::npos);
  EXPECT_EQ(manager_->Get("a").status().code(), absl::StatusCode::kNotFound);
  gated_->Fail(false);
  EXPECT_TRUE(manager_->Submit(Spec("a")).ok());
  Restart();
  EXPECT_EQ(Phase("a"), v1::QUEUED);
}

}  // namespace
}  // namespace paci

namespace paci {
namespace {

// Submissions write the store once each, whether they come one by one or
// together (then in fewer transactions, each holding several).
TEST_F(JobManagerTest, EachSubmissionIsWrittenToTheStoreOnce) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(manager_->Submit(Spec("s" + std::to_string(i))).ok());
  EXPECT_EQ(gated_->puts(), 10);
  // No workers: every job is unschedulable, which is a change, not a write.
  EXPECT_EQ(manager_->Get("s0")->status().phase(), v1::QUEUED);
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([this, t] {
      for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE(manager_->Submit(Spec("c" + std::to_string(t) + "-" + std::to_string(i))).ok());
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(gated_->puts(), 90);
  // A resubmission of the same spec writes nothing.
  ASSERT_TRUE(manager_->Submit(Spec("s0")).ok());
  EXPECT_EQ(gated_->puts(), 90);
  Restart();
  EXPECT_EQ(manager_->List(v1::QUEUED).size(), 90u);
}

std::vector<std::string> Names(const JobPage& page) {
  std::vector<std::string> names;
  for (const v1::Job& job : page.jobs) names.push_back(job.name());
  return names;
}

TEST_F(JobManagerTest, ListPagesInSubmissionOrderWithTokensAndFilters) {
  for (const char* name : {"a1", "b1", "a2", "b2", "a3"}) {
    const std::string team = name[0] == 'a' ? "red" : "blue";
    ASSERT_TRUE(manager_->Submit(Spec(name), {{"team", team}}).ok());
  }
  ASSERT_TRUE(manager_->Cancel("a2").ok());

  JobListQuery query;
  query.page_size = 2;
  absl::StatusOr<JobPage> page = manager_->List(query);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(Names(*page), (std::vector<std::string>{"a1", "b1"}));
  ASSERT_FALSE(page->next_page_token.empty());
  query.page_token = page->next_page_token;
  page = manager_->List(query);
  EXPECT_EQ(Names(*page), (std::vector<std::string>{"a2", "b2"}));
  query.page_token = page->next_page_token;
  page = manager_->List(query);
  EXPECT_EQ(Names(*page), (std::vector<std::string>{"a3"}));
  EXPECT_TRUE(page->next_page_token.empty());

  // Filters: labels, name prefix, phase, together.
  JobListQuery red;
  red.labels = {{"team", "red"}};
  EXPECT_EQ(Names(*manager_->List(red)), (std::vector<std::string>{"a1", "a2", "a3"}));
  red.phase = v1::QUEUED;
  EXPECT_EQ(Names(*manager_->List(red)), (std::vector<std::string>{"a1", "a3"}));
  JobListQuery prefix;
  prefix.name_prefix = "b";
  EXPECT_EQ(Names(*manager_->List(prefix)), (std::vector<std::string>{"b1", "b2"}));
  JobListQuery cancelled;
  cancelled.phase = v1::CANCELLED;
  EXPECT_EQ(Names(*manager_->List(cancelled)), (std::vector<std::string>{"a2"}));

  // A page that ends on a filtered-out job still resumes after it.
  red.phase = v1::JOB_PHASE_UNSPECIFIED;
  red.page_size = 1;
  std::vector<std::string> seen;
  do {
    page = manager_->List(red);
    ASSERT_TRUE(page.ok());
    for (const std::string& name : Names(*page)) seen.push_back(name);
    red.page_token = page->next_page_token;
  } while (!red.page_token.empty());
  EXPECT_EQ(seen, (std::vector<std::string>{"a1", "a2", "a3"}));

  // The loss histories can be left out.
  JobListQuery light;
  light.omit_loss_history = true;
  EXPECT_EQ(manager_->List(light)->jobs.size(), 5u);
}

TEST_F(JobManagerTest, BadPageTokensAndSizesAreInvalidArgumentNamingTheField) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(manager_->Submit(Spec("j" + std::to_string(i))).ok());
  JobListQuery query;
  query.page_size = 1;
  const std::string token = manager_->List(query)->next_page_token;
  ASSERT_FALSE(token.empty());

  for (const std::string& bad : {std::string("garbage!"), std::string("bm90IGEgdG9rZW4")}) {
    JobListQuery malformed;
    malformed.page_token = bad;
    absl::StatusOr<JobPage> page = manager_->List(malformed);
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(page.status().message().find("page_token"), std::string::npos) << page.status();
  }
  // The same token with other filters.
  JobListQuery other = query;
  other.page_token = token;
  other.name_prefix = "j";
  EXPECT_EQ(manager_->List(other).status().code(), absl::StatusCode::kInvalidArgument);
  // A page size may change from page to page.
  other.name_prefix = "";
  other.page_size = 5;
  EXPECT_EQ(Names(*manager_->List(other)), (std::vector<std::string>{"j1", "j2"}));

  JobListQuery negative;
  negative.page_size = -1;
  absl::StatusOr<JobPage> page = manager_->List(negative);
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(page.status().message().find("page_size"), std::string::npos);

  // A token from before a restart of the coordinator is stale.
  Restart();
  query.page_token = token;
  page = manager_->List(query);
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(page.status().message().find("page_token"), std::string::npos);
}

// A store in memory, for tests that hold more jobs than a disk would write quickly.
class MemoryStore : public JobStore {
 public:
  absl::Status Apply(const std::vector<v1::Job>& puts,
                     const std::vector<std::string>& deletes) override {
    absl::MutexLock lock(&mu_);
    for (const v1::Job& job : puts) {
      if (!jobs_.count(job.name())) order_.push_back(job.name());
      jobs_[job.name()] = job;
    }
    for (const std::string& name : deletes) jobs_.erase(name);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<v1::Job>> List() const override {
    absl::MutexLock lock(&mu_);
    std::vector<v1::Job> jobs;
    for (const std::string& name : order_) {
      if (jobs_.count(name)) jobs.push_back(jobs_.at(name));
    }
    return jobs;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, v1::Job> jobs_;
  std::vector<std::string> order_;
};

TEST(JobManagerListTest, PageSizeHasADefaultAndAMaximum) {
  MemoryStore store;
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  FakeClock clock;
  JobManager manager(store, metrics, {}, clock);
  ASSERT_TRUE(manager.Recover().ok());
  v1::JobSpec spec;
  spec.mutable_pipeline()->set_num_stages(2);
  for (int i = 0; i < 1200; ++i) {
    spec.set_name("job-" + std::to_string(i));
    ASSERT_TRUE(manager.Submit(spec).ok());
  }
  JobListQuery query;
  absl::StatusOr<JobPage> page = manager.List(query);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), static_cast<size_t>(JobListQuery::kDefaultPageSize));
  EXPECT_EQ(page->jobs.front().name(), "job-0");
  query.page_size = 5000;  // coerced to the maximum
  page = manager.List(query);
  EXPECT_EQ(page->jobs.size(), static_cast<size_t>(JobListQuery::kMaxPageSize));
  query.page_token = page->next_page_token;
  page = manager.List(query);
  EXPECT_EQ(page->jobs.size(), 200u);
  EXPECT_EQ(page->jobs.front().name(), "job-1000");
  EXPECT_TRUE(page->next_page_token.empty());
}

TEST_F(JobManagerTest, RetentionRemovesTheOldestFinishedJobsPastTheCount) {
  const std::filesystem::path checkpoints = std::filesystem::path(db_ + ".ckpt");
  std::filesystem::create_directories(checkpoints / "step-00000005");
  const std::filesystem::path shard = checkpoints / "step-00000005" / "stage-0-of-2.pt";
  { std::ofstream(shard) << "shard"; }
  options_.retention.finished_jobs_to_keep = 2;
  Restart();
  for (const char* name : {"a", "b", "c", "d"}) {
    v1::JobSpec spec = Spec(name);
    spec.mutable_checkpoint()->set_directory(checkpoints.string());
    ASSERT_TRUE(manager_->Submit(spec).ok());
  }
  ASSERT_TRUE(manager_->Cancel("a").ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(manager_->Cancel("b").ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(manager_->Get("a").ok());
  ASSERT_TRUE(manager_->Cancel("c").ok());  // three finished: the oldest goes
  EXPECT_EQ(manager_->Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(manager_->Get("b").ok());
  EXPECT_TRUE(manager_->Get("d").ok());  // unfinished jobs are never removed
  EXPECT_EQ(*store_->Get("a"), std::nullopt);
  EXPECT_TRUE(store_->Get("b")->has_value());
  EXPECT_TRUE(std::filesystem::exists(shard)) << "retention never touches checkpoints";
  std::string text = Exposition();
  EXPECT_NE(text.find("paci_coordinator_jobs_removed_total{reason=\"count\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("paci_coordinator_jobs{phase=\"Cancelled\"} 2"), std::string::npos) << text;
  EXPECT_EQ(text.find("training_job=\"a\""), std::string::npos) << "its series are gone: " << text;

  // The name can be used again; the new job is not the old one.
  ASSERT_TRUE(manager_->Submit(Spec("a")).ok());
  EXPECT_EQ(Phase("a"), v1::QUEUED);
  EXPECT_FALSE(manager_->Get("a")->status().has_completion_time());
}

TEST_F(JobManagerTest, RetentionRemovesFinishedJobsByAgeAndBySpecTtl) {
  options_.retention.finished_job_ttl = absl::Hours(1);
  Restart();
  ASSERT_TRUE(manager_->Submit(Spec("old")).ok());
  v1::JobSpec brief = Spec("brief");
  brief.mutable_run_policy()->set_ttl_seconds_after_finished(60);
  ASSERT_TRUE(manager_->Submit(brief).ok());
  ASSERT_TRUE(manager_->Cancel("old").ok());
  ASSERT_TRUE(manager_->Cancel("brief").ok());
  clock_.Advance(absl::Seconds(61));
  manager_->Tick();
  EXPECT_EQ(manager_->Get("brief").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(manager_->Get("old").ok());
  clock_.Advance(absl::Minutes(59));
  manager_->Tick();
  EXPECT_EQ(manager_->Get("old").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store_->Get("old"), std::nullopt);
  EXPECT_EQ(store_->List()->size(), 0u);
  EXPECT_NE(Exposition().find("paci_coordinator_jobs_removed_total{reason=\"age\"} 2"),
            std::string::npos)
      << Exposition();
}

// One namespace (a tenant, or the operator's TrainingJobs of it) holds at most
// --max_jobs_per_namespace jobs, finished ones included until retention
// removes them; a submission past it is refused naming the namespace, the
// count and the flag. Other namespaces, and jobs of none, are not held back by
// it; a restart counts the jobs it reloads; a submission still being stored
// counts too.
TEST_F(JobManagerTest, ANamespaceHoldsAtMostItsQuotaOfJobsUntilRetentionRemovesOne) {
  options_.max_jobs_per_namespace = 2;
  options_.retention.finished_job_ttl = absl::Hours(1);
  Restart();
  const std::map<std::string, std::string> team_a = {{"paci.dev/namespace", "team-a"}};
  ASSERT_TRUE(manager_->Submit(Spec("a1"), team_a).ok());
  ASSERT_TRUE(manager_->Submit(Spec("a2"), team_a).ok());
  ASSERT_TRUE(manager_->Cancel("a1").ok());  // finished, and still held
  const absl::StatusOr<v1::Job> third = manager_->Submit(Spec("a3"), team_a);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_TRUE(absl::StartsWith(third.status().message(),
                               "namespace team-a holds 2 jobs, its limit "
                               "(--max_jobs_per_namespace)"))
      << third.status();
  EXPECT_EQ(manager_->Get("a3").status().code(), absl::StatusCode::kNotFound);
  // The same submission again is the job it made, quota or not.
  EXPECT_TRUE(manager_->Submit(Spec("a2"), team_a).ok());
  // Another namespace, and jobs of none (past the quota), are not held back.
  ASSERT_TRUE(manager_->Submit(Spec("b1"), {{"paci.dev/namespace", "team-b"}}).ok());
  for (const char* name : {"n1", "n2", "n3"}) ASSERT_TRUE(manager_->Submit(Spec(name)).ok());

  Restart();  // the jobs reloaded are counted
  EXPECT_EQ(manager_->Submit(Spec("a3"), team_a).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Retention removes the finished job: its slot is free again.
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  manager_->Tick();
  ASSERT_EQ(manager_->Get("a1").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(manager_->Submit(Spec("a3"), team_a).ok());
  EXPECT_EQ(manager_->Submit(Spec("a4"), team_a).status().code(),
            absl::StatusCode::kResourceExhausted);

  // Two submissions at once for the last slot: the one still being stored
  // holds it.
  ASSERT_TRUE(manager_->Cancel("b1").ok());
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  manager_->Tick();  // team-b holds none now
  ASSERT_EQ(manager_->Get("b1").status().code(), absl::StatusCode::kNotFound);
  const std::map<std::string, std::string> team_b = {{"paci.dev/namespace", "team-b"}};
  ASSERT_TRUE(manager_->Submit(Spec("b2"), team_b).ok());
  gated_->Close();
  std::thread slow([&] { EXPECT_TRUE(manager_->Submit(Spec("b3"), team_b).ok()); });
  ASSERT_TRUE(gated_->AwaitBlockedPut(absl::Seconds(30)));
  EXPECT_EQ(manager_->Submit(Spec("b4"), team_b).status().code(),
            absl::StatusCode::kResourceExhausted);
  gated_->Open();
  slow.join();
  EXPECT_TRUE(manager_->Get("b3").ok());
  EXPECT_EQ(manager_->Get("b4").status().code(), absl::StatusCode::kNotFound);
}

// Recover's work is bounded by what retention keeps, not by every job that
// ever finished: retention runs before anything else at start-up.
TEST_F(JobManagerTest, ARestartAppliesRetentionBeforeLoadingMore) {
  options_.retention.finished_jobs_to_keep = -1;
  Restart();
  for (int i = 0; i < 6; ++i) {
    const std::string name = "f" + std::to_string(i);
    ASSERT_TRUE(manager_->Submit(Spec(name)).ok());
    ASSERT_TRUE(manager_->Cancel(name).ok());
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_TRUE(manager_->Submit(Spec("queued")).ok());
  options_.retention.finished_jobs_to_keep = 2;
  Restart();
  EXPECT_EQ(store_->List()->size(), 3u);
  EXPECT_EQ(manager_->List(v1::CANCELLED).size(), 2u);
  EXPECT_TRUE(manager_->Get("f5").ok());
  EXPECT_EQ(manager_->Get("f0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Phase("queued"), v1::QUEUED);
}

}  // namespace
}  // namespace paci

namespace paci {
namespace {

// Names reused while their earlier jobs are being removed: whatever the
// interleaving, the store ends as the coordinator holds the jobs.
TEST_F(JobManagerTest, ConcurrentSubmitCancelAndRetentionLeaveTheStoreAsTheJobsAre) {
  options_.retention.finished_jobs_to_keep = 3;
  Restart();
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([this, t] {
      for (int i = 0; i < 30; ++i) {
        const std::string name = "n" + std::to_string((t + i) % 5);
        absl::StatusOr<v1::Job> job = manager_->Submit(Spec(name));
        if (job.ok() && (i % 3 != 0)) manager_->Cancel(name).IgnoreError();
      }
    });
  }
  for (std::thread& client : clients) client.join();
  std::map<std::string, v1::JobPhase> held;
  for (const v1::Job& job : manager_->List(v1::JOB_PHASE_UNSPECIFIED)) {
    held[job.name()] = job.status().phase();
  }
  std::map<std::string, v1::JobPhase> stored;
  absl::StatusOr<std::vector<v1::Job>> in_store = store_->List();
  ASSERT_TRUE(in_store.ok());
  for (const v1::Job& job : *in_store) stored[job.name()] = job.status().phase();
  EXPECT_EQ(held, stored);
  EXPECT_LE(manager_->List(v1::CANCELLED).size(), 3u);
  Restart();
  std::map<std::string, v1::JobPhase> recovered;
  for (const v1::Job& job : manager_->List(v1::JOB_PHASE_UNSPECIFIED)) {
    recovered[job.name()] = job.status().phase();
  }
  EXPECT_EQ(recovered, held);
}

}  // namespace
}  // namespace paci
