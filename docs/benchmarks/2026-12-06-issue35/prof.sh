#!/bin/bash
# prof.sh SERVER SCENARIO CLIENTS TAG: perf record + syscall counts on CPU 0, 8 s in the middle of a 20 s step
set -u
srv=$1 scen=$2 c=$3 tag=$4
cd /work/main
log=/tmp/p35/$tag.log
NAME=p35-$tag-$(date +%s) SERVERS=$srv SCENARIOS=$scen STEPS=$c DURATION=20 bench/concurrency.sh > $log 2>&1 &
bp=$!
until grep -q "clients for" $log; do sleep 0.2; done
sleep 6
perf stat -C 0 -x, -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_accept4,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendmsg,syscalls:sys_enter_writev,syscalls:sys_enter_sendfile64,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_sched_yield,syscalls:sys_enter_read,syscalls:sys_enter_write,context-switches -o /tmp/p35/$tag.stat -- sleep 8 &
perf record -a -g -o /tmp/p35/$tag.data -- sleep 8 > /dev/null 2>&1
wait $bp
grep -E "^$srv," $(ls -t /work/main/results/p35-$tag-*/concurrency.csv | head -1)
