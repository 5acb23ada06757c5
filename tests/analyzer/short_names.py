"""short_names.py SNAPSHOT CLI: C++ names as reports shorten them (analyzer/read/frames.c), end to end.

Writes tricky demangled names (templates holding function types and lambdas, operators, clone
suffixes, return types, qualifiers) into the native frames of a copy of a snapshot, gives one live
block a stack of them all, and checks the short_name that `memsnap analyze --json` reports for
each. Prints "ok", or what differs.
"""
import sqlite3, sys, json, subprocess
cases = {
 "void at::native::gpu_reduce_kernel<float, float, 4, 4, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}> >(at::TensorIterator&, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}> const&, float) [clone .isra.0]": "at::native::gpu_reduce_kernel<>()",
 "at::native::(anonymous namespace)::foo(int)::{lambda(float)#1}::operator()(float) const": "at::native::(anonymous namespace)::foo()::{lambda()#1}::operator()()",
 "std::ostream& operator<< <char>(std::ostream&, char const*)": "operator<< <>()",
 "operator new(unsigned long)": "operator new()",
 "unsigned long foo::bar<int>(int) const &": "foo::bar<>()",
 "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&, c10::ArrayRef<long>), &at::(anonymous namespace)::wrapper_CUDA_add>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&> >, at::Tensor (at::Tensor const&)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&)": "c10::impl::wrap_kernel_functor_unboxed_<>::call()",
 "std::function<void (int)>::operator()(int) const": "std::function<>::operator()()",
 "foo::operator bool() const": "foo::operator bool()",
 "a::b::operator->() const": "a::b::operator->()",
 "bool a::operator<(a const&) const": "a::operator<()",
 "a::operator[](unsigned long)": "a::operator[]()",
 "x::y() [clone .constprop.0] [clone .cold]": "x::y()",
 "main": "main",
 "unbalanced<(int": "unbalanced<(int",
 "torch::autograd::generated::NllLossBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)": "NllLossBackward0",
 "torch::autograd::generated::MmBackward0_apply_functional(std::vector<at::Tensor, std::allocator<at::Tensor> >&&, std::array<bool, 2ul>)": "MmBackward0",
 "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)": "AccumulateGrad",
 "torch::autograd::generated::details::mm_mat2_backward(at::Tensor const&)": "torch::autograd::generated::details::mm_mat2_backward()",
}
db, cli = sys.argv[1], sys.argv[2]
import shutil, tempfile
bad, seen, names_all = [], 0, list(cases)
with sqlite3.connect(db) as c0:
    room = c0.execute("select count(*) from frames where kind = 'native'").fetchone()[0]
work = tempfile.mkdtemp()
for start in range(0, len(names_all), room):  # as many names a copy as it has native frames
    names = names_all[start:start + room]
    copy = shutil.copy(db, "%s/names%d.db" % (work, start))
    c = sqlite3.connect(copy)
    ids = [r[0] for r in c.execute("select id from frames where kind = 'native' order by id")]
    for i, n in zip(ids, names): c.execute("update frames set name = ? where id = ?", (n, i))
    sid = c.execute("select max(id) + 1 from stacks").fetchone()[0]  # one stack holding them all, for a live block
    c.execute("insert into stacks values (?, ?)", (sid, len(names)))
    for p, i in enumerate(ids[:len(names)]): c.execute("insert into stack_frames values (?, ?, ?)", (sid, p, i))
    c.execute("update blocks set stack_id = ? where size = 96 * 1048576", (sid,))
    c.commit()
    j = json.loads(subprocess.run([cli, "analyze", "--json", copy], capture_output=True, check=True).stdout)
    got = {}
    for key in ("top_sites", "leaks", "held", "live_at_peak"):
        for e in j[key]:
            for f in e["full_stack"]: got[f["name"]] = f["short_name"]
    bad += [(n, got.get(n), cases[n]) for n in names if got.get(n, cases[n]) != cases[n]]
    seen += sum(n in got for n in names)
shutil.rmtree(work)
print("ok" if not bad and seen == len(names_all) else "bad %s (seen %d)" % (bad, seen))
