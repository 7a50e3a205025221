# Host transcription (float64, plain Python) of simple_gla.cu's three chunked kernels' loops and the recurrence kernel,
# against a float64 token recurrence: checks the chunk mapping, decay exponents, masks and state hand-over only.
import math, random
def locate(slot, cu, N, Q):
    first = 0
    for s in range(N):
        b, e = cu[s], cu[s+1]; n = (e-b+Q-1)//Q
        if slot < first+n:
            start = b+(slot-first)*Q
            return s, start, min(Q, e-start)
        first += n
    return None
def chunked(q,k,v,g,s0,cu,Q,K,V,H):
    T = cu[-1]; N = len(cu)-1; slots = (T+Q-1)//Q+N
    ws = {}
    for slot in range(slots):
        loc = locate(slot,cu,N,Q)
        if loc is None: continue
        seq,start,ln = loc
        for h in range(H):
            acc = [[0.0]*V for _ in range(K)]
            for u in range(ln):
                wu = math.exp(g[h]*(ln-1-u))
                for a in range(K):
                    for b in range(V): acc[a][b] += wu*k[start+u][h][a]*v[start+u][h][b]
            ws[slot,h] = acc
    so = {}
    for seq in range(N):
        first = sum((cu[s+1]-cu[s]+Q-1)//Q for s in range(seq)); ln = cu[seq+1]-cu[seq]; chunks=(ln+Q-1)//Q
        for h in range(H):
            S = [row[:] for row in s0[seq][h]] if s0 else [[0.0]*V for _ in range(K)]
            for kk in range(chunks):
                L = min(Q, ln-kk*Q); local = ws[first+kk,h]; ws[first+kk,h] = S
                S = [[math.exp(g[h]*L)*S[a][b]+local[a][b] for b in range(V)] for a in range(K)]
            so[seq,h] = S
    o = [[[0.0]*V for _ in range(H)] for _ in range(T)]
    sc = 1/math.sqrt(K)
    for slot in range(slots):
        loc = locate(slot,cu,N,Q)
        if loc is None: continue
        seq,start,ln = loc
        for h in range(H):
            S = ws[slot,h]
            for i in range(ln):
                t = start+i
                acc = [math.exp(g[h]*(i+1))*sum(q[t][h][a]*S[a][b] for a in range(K)) for b in range(V)]
                for j in range(i+1):
                    w = sum(q[t][h][a]*k[start+j][h][a] for a in range(K))*math.exp(g[h]*(i-j))
                    for b in range(V): acc[b] += w*v[start+j][h][b]
                o[t][h] = [sc*x for x in acc]
    return o, so
def recurrent(q,k,v,g,s0,cu,K,V,H, alias_fresh=False):
    T = cu[-1]; N=len(cu)-1; o=[[None]*H for _ in range(T)]; so={}
    for s in range(N):
        for h in range(H):
            S = [row[:] for row in s0[s][h]] if s0 else [[0.0]*V for _ in range(K)]
            lam = math.exp(g[h])
            for t in range(cu[s],cu[s+1]):
                out=[0.0]*V
                for b in range(V):
                    acc=0.0
                    for a in range(K):
                        S[a][b] = lam*S[a][b]+k[t][h][a]*v[t][h][b]; acc += q[t][h][a]*S[a][b]
                    out[b]=acc/math.sqrt(K)
                o[t][h]=out
            so[s,h]=S
    return o, so
random.seed(1)
R=lambda: random.gauss(0,1)
worst = 0.0
for lens,H,K,V,Q,st in [([1,5,7],3,4,3,4,True),([65,0,17],2,3,2,8,True),([33,64],2,3,4,32,False),([9],1,4,4,1,True),([70,45],2,2,3,64,True)]:
    cu=[0]
    for l in lens: cu.append(cu[-1]+l)
    T=cu[-1]; N=len(lens)
    q=[[[R() for _ in range(K)] for _ in range(H)] for _ in range(T)]
    k=[[[R() for _ in range(K)] for _ in range(H)] for _ in range(T)]
    v=[[[R() for _ in range(V)] for _ in range(H)] for _ in range(T)]
    g=[-0.3,-0.02,0.004][:H]
    s0=[[[[0.5*R() for _ in range(V)] for _ in range(K)] for _ in range(H)] for _ in range(N)] if st else None
    o,so=chunked(q,k,v,g,s0,cu,Q,K,V,H); o2,so2=recurrent(q,k,v,g,s0,cu,K,V,H)
    e=max(abs(o[t][h][b]-o2[t][h][b]) for t in range(T) for h in range(H) for b in range(V)) if T else 0
    es=max(abs(so[s,h][a][b]-so2[s,h][a][b]) for s in range(N) for h in range(H) for a in range(K) for b in range(V))
    om,_=chunked(q,k,v,[x*1.05 for x in g],s0,cu,Q,K,V,H)
    em=max(abs(om[t][h][b]-o2[t][h][b]) for t in range(T) for h in range(H) for b in range(V)) if T else 0
    print(lens,'Q',Q,'chunked vs recurrence: o %.2e state %.2e; decay x1.05: o %.2e'%(e,es,em))
