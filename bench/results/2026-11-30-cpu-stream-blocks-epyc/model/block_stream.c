// Model: streamed mode (short output j, long mode i streamed, other mode k).
// variant 0: per-nonzero RMW of out[j] (as sptmc's mttkrp_stream).
// variant B>0: long mode cut in blocks of B rows; within a block the nonzeros sorted by j;
//   each (block, j) run summed in registers, out[j] RMW once per run.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>
#define R 32
typedef struct {uint32_t i,j,k; float v;} E;
static int cmpj(const void*a,const void*b){const E*x=a,*y=b; if(x->j!=y->j) return x->j<y->j?-1:1; if(x->i!=y->i) return x->i<y->i?-1:1; return x->k<y->k?-1:x->k>y->k;}
#define LD(p) _mm256_load_ps(p)
int main(int argc,char**argv){
  FILE*f=fopen(argv[1],"r"); int om=atoi(argv[2]), L=atoi(argv[3]);
  long cap=1<<20,n=0; uint32_t*X[3]; for(int m=0;m<3;m++)X[m]=malloc(cap*4); float*V0=malloc(cap*4);
  long a[3]; double v; long D[3]={0,0,0};
  while(fscanf(f,"%ld %ld %ld %lf",&a[0],&a[1],&a[2],&v)==4){ if(n==cap){cap*=2;for(int m=0;m<3;m++)X[m]=realloc(X[m],cap*4);V0=realloc(V0,cap*4);}
    for(int m=0;m<3;m++){X[m][n]=a[m]-1; if(a[m]>D[m])D[m]=a[m];} V0[n]=v; n++;}
  int km=3-om-L; long I=D[L], J=D[om], K=D[km];
  long *ptr=calloc(I+2,8); for(long e=0;e<n;e++) ptr[X[L][e]+1]++; for(long i=0;i<I;i++) ptr[i+1]+=ptr[i];
  long *pos=malloc((I+1)*8); memcpy(pos,ptr,(I+1)*8);
  E*es=malloc(n*sizeof(E)); for(long e=0;e<n;e++){long p=pos[X[L][e]]++; es[p].i=X[L][e]; es[p].j=X[om][e]; es[p].k=X[km][e]; es[p].v=V0[e];}
  float *A=aligned_alloc(64,I*R*4),*C=aligned_alloc(64,K*R*4);
  for(long i=0;i<I*R;i++)A[i]=(i%1000)/1000.0f; for(long i=0;i<K*R;i++)C[i]=(i%997)/997.0f;
  float *outs=aligned_alloc(64,2*J*R*4);
  printf("out %d (%ld) streamed %d (%ld) other %d (%ld) nnz=%ld\n",om,J,L,I,km,K,n);
  // variant 0 form: per long row, (j,k) pairs in stored order
  uint32_t*idx=aligned_alloc(64,n*8+64); float*val=aligned_alloc(64,n*4+64);
  for(long e=0;e<n;e++){idx[2*e]=es[e].j; idx[2*e+1]=es[e].k; val[e]=es[e].v;}
  int Bs[]={0,2048,4096,0,2048,4096,0,2048,4096};
  for(int vb=0;vb<9;vb++){ long B=Bs[vb];
  // blocked form: per block, nonzeros sorted by j; runs (j, start)
  uint32_t *bi=NULL,*bk=NULL,*rj=NULL; float*bv=NULL; long *rs=NULL,*brs=NULL; long nr=0, NB=0;
  if(B){ NB=(I+B-1)/B; E*bs=malloc(n*sizeof(E)); memcpy(bs,es,n*sizeof(E));
    #pragma omp parallel for schedule(dynamic,1)
    for(long b=0;b<NB;b++){ long e0=ptr[b*B], e1=ptr[(b+1)*B<I?(b+1)*B:I]; qsort(bs+e0,e1-e0,sizeof(E),cmpj);} 
    bi=aligned_alloc(64,n*4+64); bk=aligned_alloc(64,n*4+64); bv=aligned_alloc(64,n*4+64);
    for(long e=0;e<n;e++){bi[e]=bs[e].i; bk[e]=bs[e].k; bv[e]=bs[e].v;}
    rj=malloc(n*4); rs=malloc((n+1)*8); brs=malloc((NB+1)*8);
    for(long b=0;b<NB;b++){ brs[b]=nr; long e0=ptr[b*B], e1=ptr[(b+1)*B<I?(b+1)*B:I];
      for(long e=e0;e<e1;e++) if(e==e0||bs[e].j!=bs[e-1].j){rj[nr]=bs[e].j; rs[nr]=e; nr++;} }
    brs[NB]=nr; rs[nr]=n; free(bs);
    printf("B=%ld blocks %ld runs %ld (%.2f nnz/run)\n",B,NB,nr,(double)n/nr);
  }
  double best=1e9;
  for(int rep=0;rep<7;rep++){
    double t0=omp_get_wtime();
    #pragma omp parallel num_threads(2)
    { int t=omp_get_thread_num(); float*out=outs+t*J*R; memset(out,0,J*R*4);
      if(!B){ long i0=I*t/2,i1=I*(t+1)/2;
      for(long i=i0;i<i1;i++){ const float*ai=A+i*R; if(i+16<I) _mm_prefetch((const char*)(A+(i+16)*R),_MM_HINT_T0); __m256 b0=LD(ai),b1=LD(ai+8),b2=LD(ai+16),b3=LD(ai+24);
        for(long e=ptr[i];e<ptr[i+1];e++){
          uint32_t j=idx[2*e],k=idx[2*e+1]; __m256 x=_mm256_set1_ps(val[e]); const float*c=C+(size_t)k*R; float*o=out+(size_t)j*R;
          _mm256_store_ps(o,_mm256_fmadd_ps(_mm256_mul_ps(x,b0),LD(c),LD(o)));
          _mm256_store_ps(o+8,_mm256_fmadd_ps(_mm256_mul_ps(x,b1),LD(c+8),LD(o+8)));
          _mm256_store_ps(o+16,_mm256_fmadd_ps(_mm256_mul_ps(x,b2),LD(c+16),LD(o+16)));
          _mm256_store_ps(o+24,_mm256_fmadd_ps(_mm256_mul_ps(x,b3),LD(c+24),LD(o+24)));
        }}
      } else { long b0_=NB*t/2,b1_=NB*(t+1)/2;
        for(long b=b0_;b<b1_;b++){
          // stream the block's long rows into cache
          long r0=b*B, r1=(b+1)*B<I?(b+1)*B:I;
          (void)r0;
          long nr0=r1, nr1=(b+2)*B<I?(b+2)*B:I; if(b+1>=b1_) nr1=nr0;
          const char*pf=(const char*)(A+nr0*R), *pe=(const char*)(A+nr1*R);
          long nruns=brs[b+1]-brs[b]; long per=((pe-pf)/64 + nruns-1)/(nruns?nruns:1);
          if(b==b0_) for(long i=r0;i<r1;i++) _mm_prefetch((const char*)(A+i*R),_MM_HINT_T1), _mm_prefetch((const char*)(A+i*R+16),_MM_HINT_T1);
          for(long q=brs[b];q<brs[b+1];q++){
            for(long z=0;z<per && pf<pe;z++,pf+=64) _mm_prefetch(pf,_MM_HINT_T1);
            __m256 f0=_mm256_setzero_ps(),f1=f0,f2=f0,f3=f0;
            for(long e=rs[q];e<rs[q+1];e++){ __m256 x=_mm256_set1_ps(bv[e]); const float*c=C+(size_t)bk[e]*R; const float*ai=A+(size_t)bi[e]*R;
              f0=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(ai)),LD(c),f0); f1=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(ai+8)),LD(c+8),f1);
              f2=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(ai+16)),LD(c+16),f2); f3=_mm256_fmadd_ps(_mm256_mul_ps(x,LD(ai+24)),LD(c+24),f3);}
            float*o=out+(size_t)rj[q]*R;
            _mm256_store_ps(o,_mm256_add_ps(f0,LD(o))); _mm256_store_ps(o+8,_mm256_add_ps(f1,LD(o+8)));
            _mm256_store_ps(o+16,_mm256_add_ps(f2,LD(o+16))); _mm256_store_ps(o+24,_mm256_add_ps(f3,LD(o+24)));
          }}
      }
    }
    for(long x=0;x<J*R;x++) outs[x]+=outs[J*R+x];
    double t=omp_get_wtime()-t0; if(t<best)best=t;
  }
  double cs=0; for(long i=0;i<J*R;i+=97) cs+=outs[i];
  printf("B=%ld best %.2f ms cs %.6g\n",B,best*1e3,cs);
  if(B){free(bi);free(bk);free(bv);free(rj);free(rs);free(brs);}
  }
}
