"""The Triton convolution template: a 2-D convolution as an implicit GEMM, with the pointwise work fused.

The convolution is a GEMM whose rows are output pixels (n, oh, ow), whose columns are output channels, and whose
reduction runs over (input channel, kh, kw). The input patch is gathered by address arithmetic as each K block is
loaded (no im2col buffer is ever written), zero padding is a load mask, and the weight [Co, Ci, KH, KW] is read as
the B operand in place. The accumulator is fp32; fp32 inputs use the planned scheme like the GEMM template; the
epilogue (bias, activation, residual) runs in registers and the NCHW output is written once.
"""

from __future__ import annotations

from pipeline.expert.fusion import Kernel
from pipeline.expert.indexing import IndexVar, linear_index
from pipeline.expert.ir import Graph
from pipeline.expert.options import Options
from pipeline.expert.precision import accumulate, scheme_for, why
from pipeline.expert.rowkernel import Emitted, dtype_size, next_pow2, wide_offsets
from pipeline.expert.values import Scope, ValueWriter


class ConvKernel:
    def __init__(self, kernel: Kernel, graph: Graph, options: Options, name: str, names: dict[int, str],
                 effects: dict[int, str]) -> None:
        self.k, self.graph, self.options, self.name, self.names, self.effects = kernel, graph, options, name, names, effects
        self.conv = graph.node(kernel.anchor)
        self.x, self.w = (graph.node(v.id) for v in self.conv.args)
        batch, self.cout, self.oh, self.ow = self.conv.shape
        _, self.cin, self.h, self.wd = self.x.shape
        _, _, self.kh, self.kw = self.w.shape
        self.m = batch * self.oh * self.ow
        self.kdim = self.cin * self.kh * self.kw
        self.dtype = self.x.dtype
        self.precision = scheme_for(options.precision, self.dtype, self.kdim, self.m * self.cout)
        half = self.dtype in ("float16", "bfloat16")
        self.bm = max(16, min(128, next_pow2(self.m)))
        self.bn = max(16, min(128, next_pow2(self.cout)))
        self.bk = max(16, min(64 if half else 32, next_pow2(self.kdim)))
        if options.gemm_tile:
            self.bm, self.bn, self.bk = options.gemm_tile
        self.warps, self.stages = (8, options.num_stages or 3) if self.bm * self.bn >= 128 * 64 else (4, options.num_stages or 3)
        variables = [IndexVar("mi", (0, 2, 3), "mmask"), IndexVar("ni", (1,), "nmask")]
        self.tile_vars = tuple(variables)
        self.values = ValueWriter(graph, self.conv.shape, variables, set(kernel.nodes), names, {self.conv.id: "acc"})

    def emit(self) -> Emitted:
        (sh, sw), (ph, pw), (dh, dw) = self.conv.attr("stride"), self.conv.attr("padding"), self.conv.attr("dilation")
        sxn, sxc, sxh, sxw = self.x.stride
        weight = linear_index("rk[:, None]", [self.cin, self.kh, self.kw], list(self.w.stride[1:]))
        wide = self.options.wide_index or wide_offsets([(self.graph.node(i).shape, self.graph.node(i).stride) for i in (*self.k.loads, *self.k.outputs)])
        pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
        body = [
            f"# implicit GEMM: [{self.m} pixels x {self.kdim}] @ [{self.kdim} x {self.cout} channels]; patches gathered as loaded.",
            f"pid = {pid}",
            "num_m = tl.cdiv(M, BLOCK_M)",
            "num_n = tl.cdiv(N, BLOCK_N)",
            "group = GROUP_M * num_n",
            "first_m = (pid // group) * GROUP_M",
            "size_m = tl.minimum(num_m - first_m, GROUP_M)",
            "pid_m = first_m + (pid % group) % size_m",
            "pid_n = (pid % group) // size_m",
            "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
            "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"image = rm // {self.oh * self.ow}",
            f"oh = (rm // {self.ow}) % {self.oh}",
            f"ow = rm % {self.ow}",
            f"ih0 = oh * {sh} - {ph}",
            f"iw0 = ow * {sw} - {pw}",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "for k0 in range(0, K, BLOCK_K):",
            "    rk = k0 + tl.arange(0, BLOCK_K)",
            f"    ci = rk // {self.kh * self.kw}",
            f"    kh = (rk // {self.kw}) % {self.kh}",
            f"    kw = rk % {self.kw}",
            f"    ih = ih0[:, None] + kh[None, :] * {dh}",
            f"    iw = iw0[:, None] + kw[None, :] * {dw}",
            f"    inside = (rm[:, None] < M) & (rk[None, :] < K) & (ih >= 0) & (ih < {self.h}) & (iw >= 0) & (iw < {self.wd})",
            f"    a = tl.load({self.values.ptr(self.x.id)} + image[:, None] * {sxn} + ci[None, :] * {sxc} + ih * {sxh} + iw * {sxw}, mask=inside, other=0.0)",
            f"    b = tl.load({self.values.ptr(self.w.id)} + rn[None, :] * {self.w.stride[0]} + {weight}, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)",
            f"    {accumulate(self.dtype, self.precision)}",
            "# epilogue, on the accumulator in registers",
            "mi = rm[:, None]",
            "ni = rn[None, :]",
            "mmask = mi < M",
            "nmask = ni < N",
        ]
        scope = Scope()
        stores = [self.values.store(o, self.values.value(o, scope), spans=self.tile_vars) for o in self.k.outputs]
        body += scope.lines + stores
        params = [self.values.ptr(i) for i in self.k.loads] + [self.values.ptr(o) for o in self.k.outputs]
        constexprs = [f"{c}: tl.constexpr" for c in ("M", "N", "K", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")]
        text = "\n".join([f"@triton.jit\ndef {self.name}_kernel({', '.join(params + constexprs)}):", *(f"    {line}" for line in body)]) + "\n"
        return Emitted(text, self._launcher(), frozenset(self.values.helpers), self.tunables(), self.summary(), self._bytes())

    def tunables(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        pick = lambda options, size: tuple(v for v in options if v <= max(16, next_pow2(size))) or (16,)  # noqa: E731
        return (("BLOCK_M", pick((64, 128, 256), self.m)), ("BLOCK_N", pick((32, 64, 128), self.cout)),
                ("BLOCK_K", pick((16, 32, 64), self.kdim)), ("GROUP_M", (1, 8)), ("num_warps", (4, 8)), ("num_stages", (2, 3, 4)))

    def _launcher(self) -> str:
        loads = [self.names[i] for i in self.k.loads]
        lines = [f"def {self.name}({', '.join(loads + [self.effects[o] for o in self.k.outputs if o in self.effects])}):",
                 f'    """{self.summary()}"""']
        for o in self.k.outputs:
            if o not in self.effects:
                node = self.graph.node(o)
                lines.append(f"    {self.names[o]} = torch.empty({tuple(node.shape)}, device={loads[0]}.device, dtype=torch.{node.dtype})")
        pointers = ", ".join([*loads, *(self.effects.get(o, self.names[o]) for o in self.k.outputs)])
        grid = f'lambda meta: (triton.cdiv({self.m}, meta["BLOCK_M"]) * triton.cdiv({self.cout}, meta["BLOCK_N"]),)'
        lines.append(f"    {self.name}_kernel[{grid}](")
        lines.append(f"        {pointers}, M={self.m}, N={self.cout}, K={self.kdim},")
        lines.append(f"        BLOCK_M={self.bm}, BLOCK_N={self.bn}, BLOCK_K={self.bk}, GROUP_M={self.options.group_m}, "
                     f"num_warps={self.warps}, num_stages={self.stages})")
        returned = [self.names[o] for o in self.k.outputs if o not in self.effects]
        lines.append(f"    return {', '.join(returned)}")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        fused = f", {len(self.k.nodes)} epilogue op{'s' if len(self.k.nodes) > 1 else ''} fused" if self.k.nodes else ""
        return (f"Triton implicit-GEMM conv2d {list(self.x.shape)} * {list(self.w.shape)} -> {list(self.conv.shape)}{fused}"
                + (f", fp32 through tl.dot input_precision={why(self.precision, self.kdim, self.m * self.cout)}." if self.dtype == "float32" else "."))

    def _bytes(self) -> int:
        moved = sum(self.graph.node(i).numel * dtype_size(self.graph.node(i).dtype) for i in (*self.k.loads, *self.k.outputs))
        return moved + 2 * self.m * self.cout * self.kdim // 64
