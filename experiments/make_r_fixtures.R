#!/usr/bin/env Rscript
# R reference outputs for the resampling consensus (ConsensusClusterPlus) and clue's
# partition consensus (cl_medoid, cl_consensus(method = "SE")).
#
# Usage (from the repository root; Debian: apt-get install r-bioc-consensusclusterplus r-cran-clue):
#     Rscript experiments/make_r_fixtures.R [OUTDIR]
# OUTDIR defaults to tests/data; files go to OUTDIR/ccp and OUTDIR/clue.
# tests/test_resampling.py and tests/test_partition_consensus.py
# read them; tests/test_resampling.py::test_fixtures_regenerate_identically (slow) reruns
# this script and compares with the stored copy.

suppressPackageStartupMessages({
  library(ConsensusClusterPlus)
  library(clue)
})

args <- commandArgs(trailingOnly = TRUE)
out <- if (length(args) >= 1) args[[1]] else "tests/data"
dir.create(file.path(out, "ccp"), recursive = TRUE, showWarnings = FALSE)
dir.create(file.path(out, "clue"), recursive = TRUE, showWarnings = FALSE)
grDevices::pdf(NULL)  # the packages plot as they go; send it nowhere

load_features <- function(name, standardise) {
  df <- read.csv(gzfile(file.path("consensuskit", "datasets", "data", paste0(name, ".csv.gz"))))
  x <- as.matrix(df[, colnames(df) != "label"])
  if (standardise) x <- scale(x)  # (x - mean) / sd with the n - 1 denominator
  unname(x)
}

write_gz <- function(x, path, ...) {
  con <- gzfile(path, "w")
  write.csv(x, con, row.names = FALSE, ...)
  close(con)
}

# ---------------------------------------------------------------- ConsensusClusterPlus
# The package's own CDF() computes the area under each consensus CDF and its relative
# change but only plots them; a copy of its body that also returns them is used so
# the numbers are the package's.
cdf_returning <- ConsensusClusterPlus:::CDF
b <- body(cdf_returning)
b[[length(b) + 1]] <- quote(return(list(area = areaK, delta = deltaK)))
body(cdf_returning) <- b

pac <- function(cm, lower = 0.1, upper = 0.9) {
  v <- cm[lower.tri(cm)]
  mean(v > lower & v <= upper)
}

# clusterAlg given by name: hierarchical clustering exactly as clusterAlg = "hc" with
# innerLinkage = "average", recording which items each resample drew and their labels.
record <- new.env()
hc_recorded <- function(this_dist, k) {
  labels <- cutree(hclust(this_dist, method = "average"), k)
  items <- match(attr(this_dist, "Labels"), record$item_names)
  if (k == 2) record$rep <- record$rep + 1L
  col <- rep(-1L, length(record$item_names))
  col[items] <- labels - 1L
  record$cols[[sprintf("k%d_r%03d", k, record$rep)]] <- col
  labels
}

ccp_settings <- list(
  iris = list(standardise = FALSE),
  wine = list(standardise = TRUE),
  glass = list(standardise = TRUE)
)
max_k <- 8
for (name in names(ccp_settings)) {
  x <- load_features(name, ccp_settings[[name]]$standardise)
  d <- t(x)  # ConsensusClusterPlus clusters the columns
  colnames(d) <- paste0("i", seq_len(ncol(d)))
  write_gz(x, file.path(out, "ccp", paste0(name, "_features.csv.gz")))

  # (a) one recorded run: resamples, consensus matrices, areas, PAC, classes, ICL
  record$item_names <- colnames(d)
  record$rep <- 0L
  record$cols <- list()
  res <- ConsensusClusterPlus(d, maxK = max_k, reps = 50, pItem = 0.8, pFeature = 1,
                              clusterAlg = "hc_recorded", distance = "euclidean",
                              finalLinkage = "average", seed = 1)
  write_gz(as.data.frame(record$cols), file.path(out, "ccp", paste0(name, "_resamples.csv.gz")))
  ml <- lapply(seq_len(max_k), function(k) if (k == 1) NULL else res[[k]]$ml)
  cdf <- cdf_returning(ml)
  summary <- data.frame(k = 2:max_k, area = cdf$area, delta = cdf$delta,
                        pac = sapply(2:max_k, function(k) pac(res[[k]]$ml)))
  write.csv(summary, file.path(out, "ccp", paste0(name, "_summary.csv")), row.names = FALSE)
  classes <- sapply(2:max_k, function(k) res[[k]]$consensusClass - 1L)
  colnames(classes) <- paste0("k", 2:max_k)
  write_gz(classes, file.path(out, "ccp", paste0(name, "_classes.csv.gz")))
  k3 <- res[[3]]$ml
  write_gz(k3, file.path(out, "ccp", paste0(name, "_consensus_k3.csv.gz")))
  icl <- calcICL(res)
  cc <- as.data.frame(icl$clusterConsensus)
  cc$cluster <- cc$cluster - 1
  write.csv(cc, file.path(out, "ccp", paste0(name, "_cluster_consensus.csv")), row.names = FALSE)
  ic <- as.data.frame(icl$itemConsensus)
  ic$item <- as.integer(sub("^i", "", as.character(ic$item))) - 1L
  ic$cluster <- as.integer(as.character(ic$cluster)) - 1L
  ic$k <- as.integer(as.character(ic$k))
  ic$itemConsensus <- as.numeric(as.character(ic$itemConsensus))
  write_gz(ic, file.path(out, "ccp", paste0(name, "_item_consensus.csv.gz")))

  # (b) independent runs with the built-in "hc" (100 resamples, seeds 1..5)
  runs <- do.call(rbind, lapply(1:5, function(seed) {
    r <- ConsensusClusterPlus(d, maxK = max_k, reps = 100, pItem = 0.8, pFeature = 1,
                              clusterAlg = "hc", distance = "euclidean",
                              innerLinkage = "average", finalLinkage = "average", seed = seed)
    a <- cdf_returning(lapply(seq_len(max_k), function(k) if (k == 1) NULL else r[[k]]$ml))
    data.frame(seed = seed, k = 2:max_k, area = a$area, delta = a$delta,
               pac = sapply(2:max_k, function(k) pac(r[[k]]$ml)))
  }))
  write.csv(runs, file.path(out, "ccp", paste0(name, "_runs.csv")), row.names = FALSE)
}

# ---------------------------------------------------------------- clue
# Ensembles of hard partitions; medoid (Euclidean partition dissimilarity) and the
# least-squares soft consensus (SE) with many random starts.
clue_case <- function(name, labels, k, weights, nruns = 50, seed = 1) {
  ens <- cl_ensemble(list = lapply(seq_len(ncol(labels)), function(j) as.cl_hard_partition(labels[, j] + 1L)))
  diss <- as.matrix(cl_dissimilarity(ens, method = "euclidean"))
  medoid <- which.min(rowSums(diss))
  stopifnot(identical(cl_class_ids(cl_medoid(ens)), cl_class_ids(ens[[medoid]])))
  set.seed(seed)
  se <- cl_consensus(ens, method = "SE", weights = weights, control = list(k = k, nruns = nruns))
  write_gz(labels, file.path(out, "clue", paste0(name, "_labels.csv.gz")))
  write.csv(data.frame(weight = rep_len(weights, ncol(labels)), dissimilarity_sum = rowSums(diss)),
            file.path(out, "clue", paste0(name, "_partitions.csv")), row.names = FALSE)
  meta <- attr(se$.Data, "meta")
  # clue's stored objval pairs the best start's M with the *last* start's class
  # matching; the objective recomputed from the dissimilarities is the comparable one
  wn <- rep_len(weights, ncol(labels)) / sum(rep_len(weights, ncol(labels)))
  se_value <- sum(wn * as.vector(cl_dissimilarity(ens, se, method = "euclidean"))^2)
  write_gz(unclass(se$.Data)[, seq_len(k)], file.path(out, "clue", paste0(name, "_se_membership.csv.gz")))
  write.csv(data.frame(k = k, medoid = medoid - 1L, se_objective = se_value, clue_objval = meta$objval,
                       converged = meta$converged),
            file.path(out, "clue", paste0(name, "_result.csv")), row.names = FALSE)
}

kmeans_labels <- function(x, ks, seed) {
  set.seed(seed)
  sapply(ks, function(k) kmeans(x, k, nstart = 1, iter.max = 50)$cluster - 1L)
}

data("CKME", package = "clue")
ckme <- sapply(CKME, function(p) cl_class_ids(p) - 1L)
clue_case("ckme", ckme, k = 3, weights = 1)
set.seed(2)
clue_case("iris", kmeans_labels(load_features("iris", FALSE), sample(2:5, 20, TRUE), 2), k = 3, weights = 1)
set.seed(3)
clue_case("wine", kmeans_labels(load_features("wine", TRUE), sample(3:5, 15, TRUE), 3), k = 3, weights = 1:15)
set.seed(4)
clue_case("glass", kmeans_labels(load_features("glass", TRUE), sample(2:7, 25, TRUE), 4), k = 6, weights = 1)
cat("wrote", out, "\n")
