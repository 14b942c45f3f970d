// Model: streamed mode (short output, long mode streamed), per-nonzero read-modify-write vs fibers of (long, output) factored.
// Build: gcc -O3 -march=native -fopenmp fiber_stream.c -o fiber_stream; run: ./fiber_stream FILE.tns OUT_MODE LONG_MODE (2 threads)
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>
#define R 32
typedef struct {uint32_t j,k; float v;} E;
static int cmpj(const void*a,const void*b){const E*x=a,*y=b; if(x->j!=y->j) return x->j<y->j?-1:1; return x->k<y->k?-1:x->k>y->k;}
#define LD(p) _mm256_load_ps(p)
int main(int argc,char**argv){
  FILE*f=fopen(argv[1],"r"); int om=atoi(argv[2]), L=atoi(argv[3]);
  long cap=1<<20,n=0; uint32_t*X[3]; for(int m=0;m<3;m++)X[m]=malloc(cap*4); float*V0=malloc(cap*4);
  long a[3]; double v; long D[3]={0,0,0};
  while(fscanf(f,"%ld %ld %ld %lf",&a[0],&a[1],&a[2],&v)==4){ if(n==cap){cap*=2;for(int m=0;m<3;m++)X[m]=realloc(X[m],cap*4);V0=realloc(V0,cap*4);}
    for(int m=0;m<3;m++){X[m][n]=a[m]-1; if(a[m]>D[m])D[m]=a[m];} V0[n]=v; n++;}
  int km=3-om-L; long I=D[L];
  long *ptr=calloc(I+2,8); for(long e=0;e<n;e++) ptr[X[L][e]+1]++; for(long i=0;i<I;i++) ptr[i+1]+=ptr[i];
  long *pos=malloc((I+1)*8); memcpy(pos,ptr,(I+1)*8);
  E*es=malloc(n*sizeof(E)); for(long e=0;e<n;e++){long p=pos[X[L][e]]++; es[p].j=X[om][e]; es[p].k=X[km][e]; es[p].v=V0[e];}
  #pragma omp parallel for schedule(dynamic,1024)
  for(long i=0;i<I;i++) qsort(es+ptr[i],ptr[i+1]-ptr[i],sizeof(E),cmpj);
  uint32_t*idx=aligned_alloc(64,n*8+64); float*val=aligned_alloc(64,n*4+64);
  for(long e=0;e<n;e++){idx[2*e]=es[e].j; idx[2*e+1]=es[e].k; val[e]=es[e].v;}
  long nf=0; for(long i=0;i<I;i++) for(long e=ptr[i];e<ptr[i+1];e++) if(e==ptr[i]||es[e].j!=es[e-1].j) nf++;
  uint32_t*rf=malloc((I+1)*4),*fj=malloc(nf*4),*fp=malloc((nf+1)*4),*lk=aligned_alloc(64,n*4+64);
  nf=0; for(long i=0;i<I;i++){ rf[i]=nf; for(long e=ptr[i];e<ptr[i+1];e++){ if(e==ptr[i]||es[e].j!=es[e-1].j){fj[nf]=es[e].j; fp[nf]=e; nf++;} lk[e]=es[e].k; } } rf[I]=nf; fp[nf]=n;
  long J=D[om],K=D[km];
  float *A=aligned_alloc(64,I*R*4),*C=aligned_alloc(64,K*R*4);
  for(long i=0;i<I*R;i++)A[i]=(i%1000)/1000.0f; for(long i=0;i<K*R;i++)C[i]=(i%997)/997.0f;
  float *outs=aligned_alloc(64,2*J*R*4);
  printf("out %d (%ld) streamed %d (%ld) other %d (%ld) nnz=%ld fibers=%ld (%.2f/fiber)\n",om,J,L,I,km,K,n,nf,(double)n/nf);
  for(int variant=0;variant<2;variant++){
  double best=1e9;
  for(int rep=0;rep<7;rep++){
    double t0=omp_get_wtime();
    #pragma omp parallel num_threads(2)
    { int t=omp_get_thread_num(); float*out=outs+t*J*R; memset(out,0,J*R*4);
      long i0=I*t/2,i1=I*(t+1)/2;
      if(variant==0){
      for(long i=i0;i<i1;i++){ const float*ai=A+i*R; __m256 b0=LD(ai),b1=LD(ai+8),b2=LD(ai+16),b3=LD(ai+24);
        for(long e=ptr[i];e<ptr[i+1];e++){
          uint32_t j=idx[2*e],k=idx[2*e+1]; __m256 x=_mm256_set1_ps(val[e]); const float*c=C+(size_t)k*R; float*o=out+(size_t)j*R;
          _mm256_store_ps(o,_mm256_fmadd_ps(_mm256_mul_ps(x,b0),LD(c),LD(o)));
          _mm256_store_ps(o+8,_mm256_fmadd_ps(_mm256_mul_ps(x,b1),LD(c+8),LD(o+8)));
          _mm256_store_ps(o+16,_mm256_fmadd_ps(_mm256_mul_ps(x,b2),LD(c+16),LD(o+16)));
          _mm256_store_ps(o+24,_mm256_fmadd_ps(_mm256_mul_ps(x,b3),LD(c+24),LD(o+24)));
        }}
      } else {
      for(long i=i0;i<i1;i++){ const float*ai=A+i*R; __m256 b0=LD(ai),b1=LD(ai+8),b2=LD(ai+16),b3=LD(ai+24);
        for(uint32_t q=rf[i];q<rf[i+1];q++){
          __m256 f0=_mm256_setzero_ps(),f1=f0,f2=f0,f3=f0;
          for(uint32_t e=fp[q];e<fp[q+1];e++){ __m256 x=_mm256_set1_ps(val[e]); const float*c=C+(size_t)lk[e]*R;
            f0=_mm256_fmadd_ps(x,LD(c),f0); f1=_mm256_fmadd_ps(x,LD(c+8),f1); f2=_mm256_fmadd_ps(x,LD(c+16),f2); f3=_mm256_fmadd_ps(x,LD(c+24),f3);}
          float*o=out+(size_t)fj[q]*R;
          _mm256_store_ps(o,_mm256_fmadd_ps(f0,b0,LD(o))); _mm256_store_ps(o+8,_mm256_fmadd_ps(f1,b1,LD(o+8)));
          _mm256_store_ps(o+16,_mm256_fmadd_ps(f2,b2,LD(o+16))); _mm256_store_ps(o+24,_mm256_fmadd_ps(f3,b3,LD(o+24)));
        }}
      }
    }
    for(long x=0;x<J*R;x++) outs[x]+=outs[J*R+x];
    double t=omp_get_wtime()-t0; if(t<best)best=t;
  }
  double cs=0; for(long i=0;i<J*R;i+=97) cs+=outs[i];
  printf("variant %d best %.2f ms cs %.6g\n",variant,best*1e3,cs);
  }
}
