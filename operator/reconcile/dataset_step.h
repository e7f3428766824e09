#pragma once

// Internal to the reconcile library (operator/reconcile): the dataset
// initializer's step of ReconcileTrainingJob.

#include "operator/reconcile/reconciliation.h"

namespace paci::op {

// spec.initializer.dataset, before the job is first submitted (and again on
// a new generation): the dataset pod runs prepare-data into spec.data.dataset
// once, and nothing else starts until it has succeeded. The DatasetReady
// condition tells where it is; a failed pod fails the job with its error.
// True when the dataset is ready, or the job has none to prepare.
bool DatasetReady(Reconciliation& r);

}  // namespace paci::op
