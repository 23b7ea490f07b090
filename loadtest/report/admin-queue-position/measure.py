import json, subprocess, time, sys
KC="/tmp/op.kubeconfig"; BIN="/work/main/target/debug/shardcron"
def ask(name):
    out=subprocess.run([BIN,"status",f"herd/{name}","--kubeconfig",KC,"--output","json","--address","127.0.0.1:19450","--ring","herdring"],capture_output=True,text=True)
    return json.loads(out.stdout).get("queued")
now=time.time(); slot=(int(now)//60+1)*60; time.sleep(slot+float(sys.argv[2])-now)
name=sys.argv[1]
t0=time.time(); q0=ask(name)
if not q0: print("nothing queued"); sys.exit()
prev=q0
while True:
    time.sleep(0.2)
    q=ask(name); t=time.time()
    if q is None or q["class"]!=q0["class"] or q["ahead"]>prev["ahead"]:
        print(json.dumps({"cronjob":name,"asked_s_after_slot":round(t0-slot,2),"class":q0["class"],"ahead":q0["ahead"],"rate":q0["rate"],"expected_s":round(q0["expectedWaitSeconds"],2),"actual_s":round(t-t0,2)}), flush=True)
        break
    prev=q
    if t-t0>120: print("timeout"); break
