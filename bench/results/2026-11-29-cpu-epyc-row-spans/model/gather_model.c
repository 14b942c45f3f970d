// C model of a 3rd-order rank-32 row sum on random data (1.5 M rows, 7.26 M nonzeros, AVX2):
// variant 0 f32 gathers, 1 f16 gathers (vcvtph2ps), 2 every index 0 (rows in L1), 3 f32 with
// prefetch 16 nonzeros ahead. Args: J K VARIANT; env ROWS (row count), NT (streaming stores).
// gcc -O3 -march=znver1 -fopenmp gather_model.c -o gather_model && NT=1 OMP_NUM_THREADS=2 ./gather_model 3000 800 0
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>
#define R 32
static uint64_t s=88172645463325252ull; static inline uint64_t xr(){s^=s<<13;s^=s>>7;s^=s<<17;return s;}
int main(int argc,char**argv){
  long I=1500000, J=atol(argv[1]), K=atol(argv[2]); int mode=atoi(argv[3]); // mode: 0 f32 gathers, 1 f16 gathers, 2 zero idx, 3 f32 + prefetch
  long nnz=7260000;
  uint32_t *idx=aligned_alloc(64,nnz*8); float*val=aligned_alloc(64,nnz*4);
  long I0=getenv("ROWS")?atol(getenv("ROWS")):I; I=I0; long *ptr=malloc((I+1)*8); for(long i=0;i<=I;i++) ptr[i]=(long)((double)i*nnz/I);
  for(long n=0;n<nnz;n++){ idx[2*n]= mode==2?0:xr()%J; idx[2*n+1]=mode==2?0:xr()%K; val[n]=1.0f+(xr()%100)/100.0f;}
  float *B=aligned_alloc(64,J*R*4),*C=aligned_alloc(64,K*R*4); uint16_t *Bh=aligned_alloc(64,J*R*2),*Ch=aligned_alloc(64,K*R*2);
  for(long i=0;i<J*R;i++){B[i]=(xr()%1000)/1000.0f;} for(long i=0;i<K*R;i++){C[i]=(xr()%1000)/1000.0f;}
  for(long i=0;i<J*R;i+=8) _mm_store_si128((__m128i*)(Bh+i),_mm256_cvtps_ph(_mm256_load_ps(B+i),0));
  for(long i=0;i<K*R;i+=8) _mm_store_si128((__m128i*)(Ch+i),_mm256_cvtps_ph(_mm256_load_ps(C+i),0));
  float *out=aligned_alloc(64,I*R*4); memset(out,0,I*R*4);
  double best=1e9; int getenv_nt=getenv("NT")!=0, nost=getenv("NOST")!=0;
  for(int rep=0;rep<7;rep++){
    double t0=omp_get_wtime();
    #pragma omp parallel for schedule(static,4096)
    for(long i=0;i<I;i++){
      __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0;
      for(long n=ptr[i];n<ptr[i+1];n++){
        uint32_t j=idx[2*n],k=idx[2*n+1]; __m256 x=_mm256_set1_ps(val[n]);
        if(mode==1){
          const __m128i*b=(const __m128i*)(Bh+j*R),*c=(const __m128i*)(Ch+k*R);
          a0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_cvtph_ps(_mm_load_si128(b))),_mm256_cvtph_ps(_mm_load_si128(c)),a0);
          a1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_cvtph_ps(_mm_load_si128(b+1))),_mm256_cvtph_ps(_mm_load_si128(c+1)),a1);
          a2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_cvtph_ps(_mm_load_si128(b+2))),_mm256_cvtph_ps(_mm_load_si128(c+2)),a2);
          a3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_cvtph_ps(_mm_load_si128(b+3))),_mm256_cvtph_ps(_mm_load_si128(c+3)),a3);
        } else {
          if(mode==3 && n+16<nnz){ uint32_t jj=idx[2*(n+16)],kk=idx[2*(n+16)+1]; _mm_prefetch((const char*)(B+jj*R),_MM_HINT_T0);_mm_prefetch((const char*)(B+jj*R+16),_MM_HINT_T0);_mm_prefetch((const char*)(C+kk*R),_MM_HINT_T0);_mm_prefetch((const char*)(C+kk*R+16),_MM_HINT_T0);}
          const float*b=B+j*R,*c=C+k*R;
          a0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b)),_mm256_load_ps(c),a0);
          a1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+8)),_mm256_load_ps(c+8),a1);
          a2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+16)),_mm256_load_ps(c+16),a2);
          a3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+24)),_mm256_load_ps(c+24),a3);
        }
      }
      float*o=out+i*R; if(getenv_nt){_mm256_stream_ps(o,a0);_mm256_stream_ps(o+8,a1);_mm256_stream_ps(o+16,a2);_mm256_stream_ps(o+24,a3);} else if(nost){ if(_mm256_movemask_ps(_mm256_cmp_ps(a0,_mm256_set1_ps(-1e30f),1))) o[0]=1;} else {_mm256_store_ps(o,a0);_mm256_store_ps(o+8,a1);_mm256_store_ps(o+16,a2);_mm256_store_ps(o+24,a3);}
    }
    double t=omp_get_wtime()-t0; if(t<best)best=t;
  }
  double cs=0; for(long i=0;i<I*R;i+=977) cs+=out[i];
  printf("J=%ld K=%ld mode=%d best %.2f ms  %.1f ns/nnz/core  (cs %.3g)\n",J,K,mode,best*1e3,best*2e9/nnz,cs);
}
