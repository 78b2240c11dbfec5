//! Partitioners (METIS, random, hash, LDG streaming) and the partition
//! directory writer.
