import sys, collections
# py-spy raw: "thread (idle?);frame;frame... count"
self_c = collections.Counter(); incl = collections.Counter(); threads = collections.Counter()
total = 0
for line in open(sys.argv[1]):
    line = line.rstrip()
    if not line: continue
    stack, n = line.rsplit(" ", 1); n = int(n)
    frames = stack.split(";")
    threads[frames[0]] += n
    total += n
    seen = set()
    for f in frames[1:]:
        key = f.split(" (")[0] + " " + (f.split("(")[-1].split(":")[0] if "(" in f else "")
        if key not in seen:
            incl[key] += n; seen.add(key)
    self_c[frames[-1].split(" (")[0] + " " + (frames[-1].split("(")[-1].split(":")[0] if "(" in frames[-1] else "")] += n
filt = sys.argv[2] if len(sys.argv) > 2 else None
print("total", total); [print(t, c) for t, c in threads.most_common()]
print("--- self"); [print(f"{c:6d} {k}") for k, c in self_c.most_common(40)]
print("--- inclusive"); [print(f"{c:6d} {k}") for k, c in incl.most_common(60)]
