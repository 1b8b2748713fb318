from c_ext._fast import dot

__all__ = ["dot"]
