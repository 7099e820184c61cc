// The LAPACK routines the CPU plugin calls (OpenBLAS's LAPACK, and BLAS's ?trsm): their Fortran entry points and
// one precision's set of them, for the kernels templated on the element type (lstsq.cpp,
// linalg.cpp). A character argument comes with gfortran's hidden length.
#pragma once
#include <cstddef>
#include <cstdint>

#include "plugflow/error.h"

extern "C" {
void sgels_(const char* trans, const int* m, const int* n, const int* nrhs, float* a, const int* lda, float* b,
            const int* ldb, float* work, const int* lwork, int* info, size_t trans_len);
void dgels_(const char* trans, const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b,
            const int* ldb, double* work, const int* lwork, int* info, size_t trans_len);
void sgelsy_(const int* m, const int* n, const int* nrhs, float* a, const int* lda, float* b, const int* ldb,
             int* jpvt, const float* rcond, int* rank, float* work, const int* lwork, int* info);
void dgelsy_(const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b, const int* ldb,
             int* jpvt, const double* rcond, int* rank, double* work, const int* lwork, int* info);
void sgelsd_(const int* m, const int* n, const int* nrhs, float* a, const int* lda, float* b, const int* ldb, float* s,
             const float* rcond, int* rank, float* work, const int* lwork, int* iwork, int* info);
void dgelsd_(const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b, const int* ldb,
             double* s, const double* rcond, int* rank, double* work, const int* lwork, int* iwork, int* info);
void sgelss_(const int* m, const int* n, const int* nrhs, float* a, const int* lda, float* b, const int* ldb, float* s,
             const float* rcond, int* rank, float* work, const int* lwork, int* info);
void dgelss_(const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b, const int* ldb,
             double* s, const double* rcond, int* rank, double* work, const int* lwork, int* info);
// BLAS's triangular solve with several right-hand sides (linalg_solve_triangular)
void strsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const float* alpha, const float* a, const int* lda, float* b, const int* ldb, size_t side_len,
            size_t uplo_len, size_t transa_len, size_t diag_len);
void dtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const double* alpha, const double* a, const int* lda, double* b, const int* ldb, size_t side_len,
            size_t uplo_len, size_t transa_len, size_t diag_len);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda, const int* ipiv,
             float* b, const int* ldb, int* info, size_t trans_len);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t trans_len);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t uplo_len);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uplo_len);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork,
             int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u, const int* ldu,
             float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info, size_t jobz_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
}

namespace plugflow::cpu {

template <typename T>
struct Lapack;
template <>
struct Lapack<float> {
  static constexpr auto gels = sgels_;
  static constexpr auto gelsy = sgelsy_;
  static constexpr auto gelsd = sgelsd_;
  static constexpr auto gelss = sgelss_;
  static constexpr auto trsm = strsm_;
  static constexpr auto getrs = sgetrs_;
  static constexpr auto getrf = sgetrf_;
  static constexpr auto potrf = spotrf_;
  static constexpr auto geqrf = sgeqrf_;
  static constexpr auto orgqr = sorgqr_;
  static constexpr auto gesdd = sgesdd_;
  static constexpr auto syevd = ssyevd_;
};
template <>
struct Lapack<double> {
  static constexpr auto gels = dgels_;
  static constexpr auto gelsy = dgelsy_;
  static constexpr auto gelsd = dgelsd_;
  static constexpr auto gelss = dgelss_;
  static constexpr auto trsm = dtrsm_;
  static constexpr auto getrs = dgetrs_;
  static constexpr auto getrf = dgetrf_;
  static constexpr auto potrf = dpotrf_;
  static constexpr auto geqrf = dgeqrf_;
  static constexpr auto orgqr = dorgqr_;
  static constexpr auto gesdd = dgesdd_;
  static constexpr auto syevd = dsyevd_;
};

// A size for LAPACK's 32-bit integers; larger ones raise naming the op.
inline int lapack_int(const char* op, int64_t v) {
  PF_CHECK(v <= INT32_MAX, op, ": a dimension of ", v, " exceeds LAPACK's 32-bit sizes");
  return static_cast<int>(v);
}

}  // namespace plugflow::cpu
