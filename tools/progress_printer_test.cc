#include "tools/progress_printer.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProgressView RunningView() {
  ProgressView view;
  view.num_stages = 2;
  view.joined = 2;
  view.step = 120;
  view.total_steps = 300;
  view.train_loss = 2.1042;
  view.validation_loss = 2.2308;
  view.tokens_per_second = 4120.4;
  view.eta = absl::Seconds(45);
  view.drift_max = {1, 0};
  return view;
}

TEST(FormatThousandsTest, GroupsDigitsByThree) {
  EXPECT_EQ(FormatThousands(0), "0");
  EXPECT_EQ(FormatThousands(999), "999");
  EXPECT_EQ(FormatThousands(4120), "4,120");
  EXPECT_EQ(FormatThousands(1234567), "1,234,567");
  EXPECT_EQ(FormatThousands(-1234), "-1,234");
}

TEST(FormatEtaTest, ShowsHoursOnlyWhenNeeded) {
  EXPECT_EQ(FormatEta(absl::Seconds(45)), "0:45");
  EXPECT_EQ(FormatEta(absl::Seconds(12 * 60 + 3)), "12:03");
  EXPECT_EQ(FormatEta(absl::Seconds(3723)), "1:02:03");
  EXPECT_EQ(FormatEta(absl::Seconds(-5)), "0:00");
}

TEST(FormatProgressLineTest, ShowsStepLossesThroughputDriftAndEta) {
  EXPECT_EQ(FormatProgressLine(RunningView()),
            "step 120/300 | train 2.104 | val 2.231 | 4,120 tok/s | drift max [1 0] | ETA 0:45");
}

TEST(FormatProgressLineTest, UnknownValuesAreDashes) {
  ProgressView view = RunningView();
  view.step = 0;
  view.train_loss.reset();
  view.validation_loss.reset();
  view.tokens_per_second = 0;
  view.eta.reset();
  EXPECT_EQ(FormatProgressLine(view),
            "step 0/300 | train - | val - | 0 tok/s | drift max [1 0] | ETA -");
}

TEST(FormatProgressLineTest, SaysHowManyStagesJoinedBeforeAllHave) {
  ProgressView view = RunningView();
  view.joined = 1;
  EXPECT_EQ(FormatProgressLine(view), "waiting for workers: 1/2 workers placed");
}

TEST(FormatSummaryTableTest, ShowsTheRunAndOneRowPerStage) {
  v1::RunSummary summary;
  summary.set_job_name("kjv-small");
  summary.set_schedule("paci");
  summary.set_num_stages(2);
  summary.set_accumulation(2);
  summary.set_drift_limit(1);
  summary.set_steps(300);
  summary.set_steps_completed(300);
  summary.add_train_loss()->set_loss(2.1);
  summary.set_final_train_loss(2.1);
  summary.set_tokens_per_second(4120);
  summary.set_wall_seconds(73.24);
  v1::StageSummary* stage = summary.add_stages();
  stage->set_stage(0);
  stage->set_drift_max(1);
  stage->set_drift_bound(1);
  stage->set_drift_mean(0.75);
  stage->set_optimizer_steps(300);
  stage->set_busy_seconds(60.04);
  stage->set_idle_seconds(10.2);
  stage->set_idle_fraction(0.145);
  stage->set_peak_rss_bytes(int64_t{512} << 20);

  const std::string table = FormatSummaryTable(summary);
  EXPECT_THAT(table, HasSubstr("schedule           paci\n"));
  EXPECT_THAT(table, HasSubstr("stages (P)         2\n"));
  EXPECT_THAT(table, HasSubstr("accumulation (a)   2\n"));
  EXPECT_THAT(table, HasSubstr("drift limit (D)    1\n"));
  EXPECT_THAT(table, Not(HasSubstr("drift correction")));  // none: nothing to say
  EXPECT_THAT(table, Not(HasSubstr("warm-up")));
  summary.set_global_batch(24);
  summary.set_drift_correction("predict");
  summary.set_warmup_steps(30);
  const std::string corrected = FormatSummaryTable(summary);
  EXPECT_THAT(corrected, HasSubstr("global batch       24\n"));
  EXPECT_THAT(corrected, HasSubstr("drift correction   predict\n"));
  EXPECT_THAT(corrected, HasSubstr("warm-up            30 steps with drift 0\n"));
  EXPECT_THAT(table, HasSubstr("steps              300/300\n"));
  EXPECT_THAT(table, HasSubstr("final train loss   2.1000\n"));
  EXPECT_THAT(table, HasSubstr("final val loss     -\n"));
  EXPECT_THAT(table, HasSubstr("tokens/s           4,120\n"));
  EXPECT_THAT(table, HasSubstr("wall seconds       73.2\n"));
  EXPECT_THAT(table, HasSubstr("stage drift/bound mean drift opt steps   busy s   idle s idle %  "
                               "peak RSS MiB\n"));
  EXPECT_THAT(table, HasSubstr("    0         1/1       0.75       300     60.0     10.2   14.5 "
                               "        512.0\n"));
}

// runtime.precision as the stages resolved it: one line when they agree, one per stage when
// they do not (auto on CPUs with and without bfloat16), warnings included.
TEST(FormatSummaryTableTest, SaysThePrecisionTheStagesResolved) {
  v1::RunSummary summary;
  summary.set_num_stages(2);
  for (int s = 0; s < 2; ++s) {
    v1::StageSummary* stage = summary.add_stages();
    stage->set_stage(s);
    stage->set_precision("bf16-autocast");
    stage->set_precision_note("automatic: this CPU has bfloat16 instructions");
  }
  EXPECT_THAT(FormatSummaryTable(summary),
              HasSubstr("precision          bf16-autocast (automatic: this CPU has bfloat16 "
                        "instructions)\n"));
  summary.mutable_stages(1)->set_precision("fp32");
  summary.mutable_stages(1)->set_precision_note("automatic: this CPU has no bfloat16 instructions");
  const std::string mixed = FormatSummaryTable(summary);
  EXPECT_THAT(mixed, HasSubstr("precision, stage 0 bf16-autocast (automatic: this CPU has bfloat16 "
                               "instructions)\n"));
  EXPECT_THAT(mixed, HasSubstr("precision, stage 1 fp32 (automatic: this CPU has no bfloat16 "
                               "instructions)\n"));
  EXPECT_THAT(mixed, Not(HasSubstr("precision          ")));
  summary.clear_stages();
  EXPECT_THAT(FormatSummaryTable(summary), Not(HasSubstr("precision")));
}

// A job resumed at its last step: it trained nothing, evaluated what it resumed, and says so
// instead of a table of zeros.
TEST(FormatAlreadyCompleteTest, SaysTheStepTheLossOfTheCheckpointAndHowToTrainAgain) {
  v1::RunSummary summary;
  summary.set_job_name("kjv-small");
  summary.set_succeeded(true);
  summary.set_steps(1000);
  summary.set_steps_completed(1000);
  v1::LossPoint* point = summary.add_validation_loss();
  point->set_step(1000);
  point->set_loss(1.61234);
  summary.set_final_validation_loss(1.61234);
  ASSERT_TRUE(IsAlreadyComplete(summary));
  EXPECT_EQ(FormatAlreadyComplete(summary, "runs/kjv-small"),
            "kjv-small is already complete: its checkpoint in runs/kjv-small is at step 1000 of "
            "1000, so there was nothing to train.\n"
            "final val loss     1.6123 (of the weights it resumed)\n"
            "To train again from the start, remove runs/kjv-small or set checkpoint.directory to "
            "another folder; to train on, raise training.steps.\n");
  v1::RunSummary trained = summary;  // a run that trained has train losses
  v1::LossPoint* train = trained.add_train_loss();
  train->set_step(1000);
  train->set_loss(1.5);
  EXPECT_FALSE(IsAlreadyComplete(trained));
  v1::RunSummary failed = summary;
  failed.set_succeeded(false);
  EXPECT_FALSE(IsAlreadyComplete(failed));
  v1::RunSummary short_of_it = summary;
  short_of_it.set_steps_completed(900);
  EXPECT_FALSE(IsAlreadyComplete(short_of_it));
}

TEST(FormatSummaryTableTest, ShowsTheCutAndEachStagesPredictedBusyTime) {
  v1::RunSummary summary;
  summary.set_partition("balanced");
  for (int b : {0, 6, 10}) summary.add_partition_boundaries(b);
  v1::StageSummary* stage = summary.add_stages();
  stage->set_busy_seconds(60.04);
  stage->set_predicted_busy_seconds(58.2);
  stage->set_units("emb..h2.attn");
  const std::string table = FormatSummaryTable(summary);
  EXPECT_THAT(table, HasSubstr("partition          balanced [0,6,10]\n"));
  EXPECT_THAT(table, HasSubstr("peak RSS MiB pred busy s  units\n"));
  EXPECT_THAT(table, HasSubstr("0.0        58.2  emb..h2.attn\n"));
}

TEST(ProgressPrinterTest, RedrawsInPlaceOnATerminal) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*redraw_in_place=*/true);
  const absl::Time t0 = absl::FromUnixSeconds(100);
  ProgressView waiting = RunningView();
  waiting.joined = 0;
  printer.Update(waiting, t0);
  printer.Update(RunningView(), t0 + absl::Milliseconds(200));
  ProgressView shorter = RunningView();
  shorter.joined = 1;
  printer.Update(shorter, t0 + absl::Milliseconds(400));
  printer.BreakLine();
  out << "stage 1 failed\n";
  printer.BreakLine();  // nothing drawn since: no empty line
  printer.Finish(RunningView());
  const std::string running = FormatProgressLine(RunningView());
  const std::string one_joined = "waiting for workers: 1/2 workers placed";
  EXPECT_EQ(out.str(), "\rwaiting for workers: 0/2 workers placed\r" + running + "\r" + one_joined +
                           std::string(running.size() - one_joined.size(), ' ') +
                           "\nstage 1 failed\n\r" + running + "\n");
}

TEST(ProgressPrinterTest, PrintsAFullLineEveryIntervalOtherwise) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*redraw_in_place=*/false, absl::Seconds(5));
  const absl::Time t0 = absl::FromUnixSeconds(100);
  printer.Update(RunningView(), t0);
  printer.Update(RunningView(), t0 + absl::Seconds(1));
  printer.Update(RunningView(), t0 + absl::Seconds(4.9));
  printer.Update(RunningView(), t0 + absl::Seconds(5));
  printer.Finish(RunningView());  // already the last line printed
  const std::string line = FormatProgressLine(RunningView()) + "\n";
  EXPECT_EQ(out.str(), line + line);
}

TEST(ProgressPrinterTest, FinishPrintsTheFinalStateOtherwiseSkippedByTheInterval) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*redraw_in_place=*/false, absl::Seconds(5));
  ProgressView early = RunningView();
  early.step = 10;
  printer.Update(early, absl::FromUnixSeconds(100));
  ProgressView done = RunningView();
  done.step = 300;
  printer.Update(done, absl::FromUnixSeconds(101));
  printer.Finish(done);
  EXPECT_EQ(out.str(), FormatProgressLine(early) + "\n" + FormatProgressLine(done) + "\n");
}

TEST(ProgressPrinterTest, WorkerLinesGoAboveTheLiveLineOnATerminal) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*redraw_in_place=*/true);
  printer.PrintAbove("[stage 0] before any progress");
  printer.Update(RunningView(), absl::FromUnixSeconds(100));
  printer.PrintAbove("[stage 1] a log line");
  printer.Finish(RunningView());
  const std::string running = FormatProgressLine(RunningView());
  EXPECT_EQ(out.str(), "[stage 0] before any progress\n\r" + running + "\r\033[K[stage 1] a log line\n" +
                           running + "\r" + running + "\n");
}

TEST(ProgressPrinterTest, WorkerLinesArePrintedAsTheyAreOtherwise) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*redraw_in_place=*/false);
  printer.Update(RunningView(), absl::FromUnixSeconds(100));
  printer.PrintAbove("[stage 1] a log line");
  EXPECT_EQ(out.str(), FormatProgressLine(RunningView()) + "\n[stage 1] a log line\n");
}

}  // namespace
}  // namespace paci
