// C models of a 3rd-order tensor's rank-32 MTTKRP over its mode-0 row groups (AVX2), read
// from a plain .tns. Variants: 0 mode 0 row by row (NT stores), 1 two rows interleaved;
// 10 mode 1 streamed in mode 0's order (multiply and add, as sptmc), 12 with an FMA,
// 13 prefetching the long row 16 rows ahead.
// gcc -O3 -march=znver1 -fopenmp mode_models.c -o mode_models && OMP_NUM_THREADS=2 ./mode_models FILE VARIANT
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>
#define R 32
int main(int argc,char**argv){
  FILE*f=fopen(argv[1],"r"); int variant=atoi(argv[2]);
  long cap=1<<20,n=0; uint32_t*I0=malloc(cap*4),*J0=malloc(cap*4),*K0=malloc(cap*4); float*V0=malloc(cap*4);
  long a,b,c; double v; long I=0,J=0,K=0;
  while(fscanf(f,"%ld %ld %ld %lf",&a,&b,&c,&v)==4){ if(n==cap){cap*=2;I0=realloc(I0,cap*4);J0=realloc(J0,cap*4);K0=realloc(K0,cap*4);V0=realloc(V0,cap*4);}
    I0[n]=a-1;J0[n]=b-1;K0[n]=c-1;V0[n]=v; if(a>I)I=a; if(b>J)J=b; if(c>K)K=c; n++;}
  long *ptr=calloc(I+2,8); for(long e=0;e<n;e++) ptr[I0[e]+1]++; for(long i=0;i<I;i++) ptr[i+1]+=ptr[i];
  long *pos=malloc((I+1)*8); memcpy(pos,ptr,(I+1)*8);
  uint32_t*idx=aligned_alloc(64,n*8+64); float*val=aligned_alloc(64,n*4+64);
  for(long e=0;e<n;e++){ long p=pos[I0[e]]++; idx[2*p]=J0[e]; idx[2*p+1]=K0[e]; val[p]=V0[e]; }
  float *B=aligned_alloc(64,J*R*4),*C=aligned_alloc(64,K*R*4);
  for(long i=0;i<J*R;i++)B[i]=(i%1000)/1000.0f; for(long i=0;i<K*R;i++)C[i]=(i%997)/997.0f;
  float *out=aligned_alloc(64,I*R*4); memset(out,0,I*R*4); float*Af=aligned_alloc(64,I*R*4); for(long i=0;i<I*R;i++)Af[i]=(i%991)/991.0f; float*outs[8]; for(int t=0;t<8;t++) outs[t]=aligned_alloc(64,J*R*4);
  printf("I=%ld J=%ld K=%ld nnz=%ld\n",I,J,K,n);
  double best=1e9;
  for(int rep=0;rep<7;rep++){
    double t0=omp_get_wtime();
    if(variant>=10)
    {
    int T=omp_get_max_threads();
    #pragma omp parallel
    {
      int t=omp_get_thread_num(); float*o=outs[t]; memset(o,0,J*R*4);
      long lo=I*t/T, hi=I*(t+1)/T;
      for(long i=lo;i<hi;i++){
        long s=ptr[i],e=ptr[i+1]; if(s==e) continue;
        const float*A=Af+i*R; if(variant==13) _mm_prefetch((const char*)(A+16*R),_MM_HINT_T0),_mm_prefetch((const char*)(A+16*R+16),_MM_HINT_T0);
        __m256 a0=_mm256_load_ps(A),a1=_mm256_load_ps(A+8),a2=_mm256_load_ps(A+16),a3=_mm256_load_ps(A+24);
        for(long n=s;n<e;n++){
          uint32_t j=idx[2*n],k=idx[2*n+1]; __m256 x=_mm256_set1_ps(val[n]); const float*c=C+k*R; float*oo=o+j*R;
          if(variant==12){
          _mm256_store_ps(oo,_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(c)),a0,_mm256_load_ps(oo)));
          _mm256_store_ps(oo+8,_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(c+8)),a1,_mm256_load_ps(oo+8)));
          _mm256_store_ps(oo+16,_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(c+16)),a2,_mm256_load_ps(oo+16)));
          _mm256_store_ps(oo+24,_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(c+24)),a3,_mm256_load_ps(oo+24)));
          } else {
          _mm256_store_ps(oo,_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(x,a0),_mm256_load_ps(c)),_mm256_load_ps(oo)));
          _mm256_store_ps(oo+8,_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(x,a1),_mm256_load_ps(c+8)),_mm256_load_ps(oo+8)));
          _mm256_store_ps(oo+16,_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(x,a2),_mm256_load_ps(c+16)),_mm256_load_ps(oo+16)));
          _mm256_store_ps(oo+24,_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(x,a3),_mm256_load_ps(c+24)),_mm256_load_ps(oo+24)));
          }
        }
      }
    }
    }
    else {
    if(variant==0){
    #pragma omp parallel for schedule(static,4096)
    for(long i=0;i<I;i++){
      __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0;
      for(long e=ptr[i];e<ptr[i+1];e++){
        uint32_t j=idx[2*e],k=idx[2*e+1]; __m256 x=_mm256_set1_ps(val[e]);
        const float*b=B+j*R,*c=C+k*R;
        a0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b)),_mm256_load_ps(c),a0);
        a1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+8)),_mm256_load_ps(c+8),a1);
        a2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+16)),_mm256_load_ps(c+16),a2);
        a3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+24)),_mm256_load_ps(c+24),a3);
      }
      float*o=out+i*R; _mm256_stream_ps(o,a0);_mm256_stream_ps(o+8,a1);_mm256_stream_ps(o+16,a2);_mm256_stream_ps(o+24,a3);
    }
    } else {
    // two rows at a time, interleaved: nonzero e of row i beside nonzero e of row i+1
    #pragma omp parallel for schedule(static,2048)
    for(long i=0;i<I-1;i+=2){
      __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0,c0=a0,c1=a0,c2=a0,c3=a0;
      long e=ptr[i],ee=ptr[i+1],f2=ptr[i+1],fe=ptr[i+2];
      while(e<ee && f2<fe){
        {uint32_t j=idx[2*e],k=idx[2*e+1]; __m256 x=_mm256_set1_ps(val[e]); const float*b=B+j*R,*c=C+k*R;
        a0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b)),_mm256_load_ps(c),a0);
        a1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+8)),_mm256_load_ps(c+8),a1);
        a2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+16)),_mm256_load_ps(c+16),a2);
        a3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+24)),_mm256_load_ps(c+24),a3);}
        {uint32_t j=idx[2*f2],k=idx[2*f2+1]; __m256 x=_mm256_set1_ps(val[f2]); const float*b=B+j*R,*c=C+k*R;
        c0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b)),_mm256_load_ps(c),c0);
        c1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+8)),_mm256_load_ps(c+8),c1);
        c2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+16)),_mm256_load_ps(c+16),c2);
        c3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+24)),_mm256_load_ps(c+24),c3);}
        e++; f2++;
      }
      for(;e<ee;e++){uint32_t j=idx[2*e],k=idx[2*e+1]; __m256 x=_mm256_set1_ps(val[e]); const float*b=B+j*R,*c=C+k*R;
        a0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b)),_mm256_load_ps(c),a0);
        a1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+8)),_mm256_load_ps(c+8),a1);
        a2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+16)),_mm256_load_ps(c+16),a2);
        a3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+24)),_mm256_load_ps(c+24),a3);}
      for(;f2<fe;f2++){uint32_t j=idx[2*f2],k=idx[2*f2+1]; __m256 x=_mm256_set1_ps(val[f2]); const float*b=B+j*R,*c=C+k*R;
        c0=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b)),_mm256_load_ps(c),c0);
        c1=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+8)),_mm256_load_ps(c+8),c1);
        c2=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+16)),_mm256_load_ps(c+16),c2);
        c3=_mm256_fmadd_ps(_mm256_mul_ps(x,_mm256_load_ps(b+24)),_mm256_load_ps(c+24),c3);}
      float*o=out+i*R; _mm256_stream_ps(o,a0);_mm256_stream_ps(o+8,a1);_mm256_stream_ps(o+16,a2);_mm256_stream_ps(o+24,a3);
      o+=R; _mm256_stream_ps(o,c0);_mm256_stream_ps(o+8,c1);_mm256_stream_ps(o+16,c2);_mm256_stream_ps(o+24,c3);
    }
    }
    }
    double t=omp_get_wtime()-t0; if(t<best)best=t;
  }
  double cs=0; if(variant>=10) for(long i=0;i<J*R;i+=7) cs+=outs[0][i]; else for(long i=0;i<(I&~1L)*R;i+=977) cs+=out[i];
  long hist[8]={0}; for(long i=0;i<I;i++){long l=ptr[i+1]-ptr[i]; hist[l<7?l:7]++;}
  printf("variant %d best %.2f ms cs %.6g  rowlen hist 0..7+: %ld %ld %ld %ld %ld %ld %ld %ld\n",variant,best*1e3,cs,hist[0],hist[1],hist[2],hist[3],hist[4],hist[5],hist[6],hist[7]);
}
