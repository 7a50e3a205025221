# Lane-by-lane transcription of moe_route_sigmoid_grouped_kernel (warp butterfly merges, ranks_before) vs the CPU
# reference's sorts (float64 here; checks the selection logic, ties included).
import math, random
INF = float('inf')
def ranks_before(pa, ia, pb, ib):
    if ia < 0: return False
    if ib < 0: return True
    if pa > pb: return True
    if pa < pb: return False
    return ia < ib
def kernel(logits, bias, E, k, G, kept, norm, scaling):
    per = E//G; P = 16
    sg = [[0.0]*P for _ in range(32)]; b = [[-INF]*P for _ in range(32)]
    for l in range(32):
        for s in range(P):
            e = l+32*s
            if e < E:
                sg[l][s] = 1/(1+math.exp(-logits[e])); b[l][s] = sg[l][s]+bias[e]
    gs = []
    for g in range(G):
        first = [-INF]*32; second = [-INF]*32
        for l in range(32):
            for s in range(P):
                e = l+32*s
                if e >= E or e//per != g: continue
                if b[l][s] > first[l]: second[l] = first[l]; first[l] = b[l][s]
                elif b[l][s] > second[l]: second[l] = b[l][s]
        o = 16
        while o > 0:
            f2 = [first[l ^ o] for l in range(32)]; s2 = [second[l ^ o] for l in range(32)]
            for l in range(32):
                lo = min(first[l], f2[l]); second[l] = max(lo, max(second[l], s2[l])); first[l] = max(first[l], f2[l])
            o //= 2
        gs.append(first[0]+second[0])
    keptg = [0]*G
    for j in range(kept):
        best = -1
        for g in range(G):
            if not keptg[g] and (best < 0 or gs[g] > gs[best]): best = g
        keptg[best] = 1
    taken = [0]*32; sel = []
    for j in range(k):
        bp = [0.0]*32; bs = [0.0]*32; be = [-1]*32
        for l in range(32):
            for s in range(P):
                e = l+32*s
                if e >= E or (taken[l] >> s) & 1: continue
                m = b[l][s] if keptg[e//per] else -INF
                if ranks_before(m, e, bp[l], be[l]): bp[l], bs[l], be[l] = m, sg[l][s], e
        o = 16
        while o > 0:
            op = [bp[l ^ o] for l in range(32)]; os_ = [bs[l ^ o] for l in range(32)]; oe = [be[l ^ o] for l in range(32)]
            for l in range(32):
                if ranks_before(op[l], oe[l], bp[l], be[l]): bp[l], bs[l], be[l] = op[l], os_[l], oe[l]
            o //= 2
        for l in range(32):
            if be[l] % 32 == l: taken[l] |= 1 << (be[l]//32)
        sel.append((be[0], bs[0]))
    return [e for e,_ in sel]
def ref(logits, bias, E, k, G, kept):
    per = E//G
    s = [1/(1+math.exp(-x)) for x in logits]; b = [s[e]+bias[e] for e in range(E)]
    grp = []
    for g in range(G):
        f = sc = -INF
        for e in range(g*per,(g+1)*per):
            if b[e] > f: sc = f; f = b[e]
            elif b[e] > sc: sc = b[e]
        grp.append(f+sc)
    order = sorted(range(G), key=lambda g: (-grp[g], g))[:kept]
    m = [b[e] if e//per in order else -INF for e in range(E)]
    return sorted(range(E), key=lambda e: (-m[e], e))[:k]
random.seed(3); bad = 0; n = 0
for E,k,G,kept in [(256,8,8,4),(16,3,4,2),(512,16,16,3),(6,2,3,1),(64,6,8,2)]:
    for t in range(30):
        zero = t % 5 == 0
        logits = [0.0 if zero else random.gauss(0,2) for _ in range(E)]
        bias = [0.0 if zero else random.gauss(0,0.3) for _ in range(E)]
        if t % 7 == 1:  # duplicated values: ties inside groups
            logits = [round(x) for x in logits]; bias = [0.0]*E
        a = kernel(logits, bias, E, k, G, kept, True, 2.5); r = ref(logits, bias, E, k, G, kept)
        n += 1; bad += a != r
        if a != r and bad < 4: print('MISMATCH', E, k, G, kept, a, r)
print('tokens', n, 'mismatches', bad)
