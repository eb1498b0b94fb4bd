import subprocess, sys, re, collections
def rows(data, comms):
    out = subprocess.run(["perf","report","-i",data,"--no-children","--sort","dso,sym","-q","-g","none",
                          "--cpu","0","--comms",comms],capture_output=True,text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(\S+)", line)
        if m: yield float(m.group(1)), m.group(2), m.group(4)
B = [("epoll", r"^(ep_|do_epoll|__x64_sys_epoll|__ep_|ep_item|epoll)"),
     ("poll of sockets (LT re-poll)", r"^(sock_poll|tcp_poll)$"),
     ("accept and close", r"(accept|inet_csk|tcp_close|__tcp_close|inet_release|sock_close|__fput|tcp_set_state|tcp_time_wait|inet_twsk|tcp_v4_syn|tcp_conn_request|tcp_create_openreq|sk_clone|tcp_v4_destroy|sk_free|__sk_destruct|d_alloc|alloc_file|new_inode|sock_alloc|dput|tcp_rcv_state_process|inet_ehash|tcp_check_req|reqsk)"),
     ("tcp/ip send", r"^(tcp_sendmsg|tcp_write_xmit|__tcp_transmit|tcp_push|__ip_queue|ip_|__dev_queue|loopback|dev_hard|skb_clone|tcp_established_options|tcp_rate|tcp_event|__tcp_push|tcp_skb|sk_stream|tcp_stream_alloc|__alloc_skb|_copy_from_iter|kmalloc_reserve|tcp_schedule_loss|tcp_options_write|__sys_sendmsg|___sys_sendmsg|____sys_sendmsg|sock_sendmsg|inet_sendmsg|tcp_wfree|tcp_small_queue|bpf_skops|tcp_tso|tcp_mss|tcp_current_mss|tcp_chrono)"),
     ("tcp/ip receive", r"^(tcp_v4_rcv|tcp_rcv|__inet_lookup|tcp_ack|tcp_data|tcp_recvmsg|__skb_datagram|skb_copy_datagram|tcp_clean_rbuf|tcp_rcv_space|inet_recvmsg|__sys_recvfrom|sock_recvmsg|tcp_cleanup_rbuf|net_rx|process_backlog|__netif|netif_|ip_rcv|ip_local|tcp_add_backlog|tcp_filter|sk_filter|tcp_v4_do_rcv|tcp_queue_rcv|tcp_urg|tcp_event_data_recv|sock_def_readable|tcp_check_space|tcp_data_ready|__release_sock|release_sock|lock_sock|tcp_v4_early_demux|__napi|tcp_mstamp|tcp_ack_update|tcp_clean_rtx|__kfree_skb|skb_release|kfree_skbmem|skb_attempt_defer|skb_defer|tcp_delack|tcp_send_ack|__tcp_ack_snd|tcp_send_delayed_ack|__tcp_send_ack|_copy_to_iter|copy_user|rep_movs|tcp_update_pacing|tcp_grow_window|tcp_measure_rcv|tcp_try_rmem|tcp_rearm_rto|__tcp_select_window|tcp_select_window|bpf_skops)"),
     ("memory (slab, page)", r"^(kmem_|__kmem|slab_|___slab|__slab|allocate_slab|kfree|__kmalloc|kmalloc|__alloc_pages|get_page_from|rmqueue|free_unref|__free_pages|memcg|mod_objcg|obj_cgroup|refill_obj|__memcg|page_counter|setup_object|shuffle_freelist|__put_partials|put_cpu_partial|get_partial|mem_cgroup)"),
     ("scheduler, wake-ups, idle exits", r"^(schedule|__schedule|pick_|put_prev|enqueue|dequeue|update_|try_to_wake|ttwu|__wake_up|native_write_msr|sched_|do_sched_yield|yield|__x64_sys_sched_yield|finish_task|switch_|__switch|psi_|set_next|check_preempt|resched|raw_spin_rq|hrtimer|tick_|ktime|clockevents|lapic|x2apic|native_apic|__sysvec|sysvec|asm_sysvec|irq_|__irq|timerqueue|enqueue_hrtimer|__hrtimer|rb_|select_task|wakeup_preempt|reweight|place_entity|avg_vruntime|__calc_delta|cpuacct|account_|__cgroup_account|vtime|cpu_util|dl_|rt_|prepare_task|context_switch|membarrier|__update|load_balance|newidle|sched_balance|_raw_spin_unlock_irq)"),
     ("syscall entry and fd lookup", r"^(entry_SYSCALL|do_syscall|syscall_|__x64_sys_|fdget|fput|__fget|__fdget|x64_sys_call|exit_to_user|syscall_exit|__seccomp|seccomp|sockfd_lookup|__sys_|security_|apparmor|bpf_prog|__bpf|audit|irqentry|arch_exit|rseq|switch_fpu|fpregs|restore_fpregs|error_entry|clear_bhb|srso|entry_|__rseq)"),
     ]
def bucket(dso, sym):
    if dso != "[kernel.kallsyms]":
        if "engine" in dso: return "engine (user, C)"
        if "libc" in dso: return "libc"
        if "python" in dso: return "python"
        if "ssl" in dso or "crypto" in dso: return "openssl"
        if dso.startswith("nginx") or dso == "nginx": return "nginx (user)"
        return "other user: " + dso
    for name, rx in B:
        if re.search(rx, sym): return name
    return "kernel, other"
for data, comms in zip(sys.argv[1::2], sys.argv[2::2]):
    tot = collections.Counter(); syms = collections.defaultdict(collections.Counter)
    for pct, dso, sym in rows(data, comms):
        b = bucket(dso, sym); tot[b] += pct; syms[b][sym] += pct
    s = sum(tot.values())
    print(f"== {data}: {s:.1f}% of samples")
    for b, v in tot.most_common():
        print(f"  {v/s*100:5.1f}%  {b:34s} {', '.join(f'{k} {x/s*100:.1f}' for k, x in syms[b].most_common(4))}")
