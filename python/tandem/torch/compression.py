"""Horovod's gradient compression: how a tensor travels in allreduce. The
16-bit compressors halve the bytes; values are summed in float32 and
rounded back, and the result returns in the tensor's own dtype."""
import torch


class Compressor:
    """Compresses a tensor before it is sent and restores it after."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and what decompress() needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    wire_dtype = ""  # as init() set it

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _HalfCompressor(Compressor):
    half = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.half:
            return tensor.to(cls.half), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_HalfCompressor):
    half = torch.float16
    wire_dtype = "fp16"


class BF16Compressor(_HalfCompressor):
    """A Tandem extension: bfloat16 keeps float32's range."""
    half = torch.bfloat16
    wire_dtype = "bf16"


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def wire_dtype_of(compression, what):
    """The wire format DistributedOptimizer's buckets use for `compression`."""
    wire = getattr(compression, "wire_dtype", None)
    if wire is None:
        raise ValueError(f"{what}: compression must be Compression.none, fp16 or bf16; Tandem's gradient buckets "
                         f"cannot run a custom compressor ({getattr(compression, '__name__', compression)!r})")
    return wire
