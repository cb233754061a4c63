"""otlp_schema: a protobuf decoder driven by the .proto text flightrec ships
as its OTLP reference (scripts/flightrec_lib/otlp/profiles_v1development.proto),
for the export tests. It reads the message definitions from the text and
decodes bytes by them, checking every field's wire type against its declared
type and refusing unknown field numbers; it shares no code with the encoder
(flightrec_lib/otlp/request.py), so a wrong number or type there shows here.

    schema = Schema.load()
    doc = schema.decode("ExportProfilesServiceRequest", data)
    # messages -> dicts {field name: value}; repeated fields -> lists
"""
import os
import re
import struct

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTO = os.path.join(ROOT, "scripts", "flightrec_lib", "otlp", "profiles_v1development.proto")

VARINT_TYPES = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "enum"}
FIXED64_TYPES = {"fixed64", "sfixed64", "double"}
FIXED32_TYPES = {"fixed32", "sfixed32", "float"}
LEN_TYPES = {"string", "bytes"}
SCALARS = VARINT_TYPES | FIXED64_TYPES | FIXED32_TYPES | LEN_TYPES


class DecodeError(Exception):
    pass


class Field:
    def __init__(self, name, type_, number, repeated, oneof=None):
        self.name, self.type, self.number, self.repeated, self.oneof = name, type_, number, repeated, oneof


class Schema:
    def __init__(self, messages, package):
        self.messages = messages  # name -> {number: Field}
        self.package = package

    @classmethod
    def load(cls, path=PROTO):
        with open(path) as f:
            return cls.parse(f.read())

    @classmethod
    def parse(cls, text):
        text = re.sub(r"//[^\n]*", "", text)
        package = re.search(r"\bpackage\s+([\w.]+)\s*;", text).group(1)
        messages = {}
        for m in re.finditer(r"\bmessage\s+(\w+)\s*\{", text):
            body = _block(text, m.end() - 1)
            fields = {}
            for o in re.finditer(r"\boneof\s+(\w+)\s*\{", body):
                for f in _fields(_block(body, o.end() - 1), oneof=o.group(1)):
                    fields[f.number] = f
            flat = re.sub(r"\boneof\s+\w+\s*\{[^}]*\}", "", body)
            for f in _fields(flat):
                fields[f.number] = f
            messages[m.group(1)] = fields
        for fields in messages.values():
            for f in fields.values():
                if f.type not in SCALARS and f.type not in messages:
                    raise DecodeError("type %s of field %s is not defined" % (f.type, f.name))
        return cls(messages, package)

    def field(self, message, name):
        return next(f for f in self.messages[message].values() if f.name == name)

    def decode(self, message, data):
        fields = self.messages[message]
        out = {}
        pos, n = 0, len(data)
        while pos < n:
            key, pos = _uvarint(data, pos)
            number, wire = key >> 3, key & 7
            f = fields.get(number)
            if f is None:
                raise DecodeError("%s has no field %d" % (message, number))
            if wire == 2:
                size, pos = _uvarint(data, pos)
                if pos + size > n:
                    raise DecodeError("%s.%s runs past the end" % (message, f.name))
                chunk, pos = data[pos:pos + size], pos + size
                if f.type in self.messages:
                    values = [self.decode(f.type, chunk)]
                elif f.type == "string":
                    values = [chunk.decode("utf-8")]
                elif f.type == "bytes":
                    values = [bytes(chunk)]
                elif f.repeated:  # packed scalars
                    values = _packed(chunk, f)
                else:
                    raise DecodeError("%s.%s (%s) came length-delimited" % (message, f.name, f.type))
            elif wire == 0 and f.type in VARINT_TYPES:
                v, pos = _uvarint(data, pos)
                values = [_signed(v, f.type)]
            elif wire == 1 and f.type in FIXED64_TYPES:
                values = [struct.unpack_from("<Q" if f.type == "fixed64" else "<q" if f.type == "sfixed64"
                                             else "<d", data, pos)[0]]
                pos += 8
            elif wire == 5 and f.type in FIXED32_TYPES:
                values = [struct.unpack_from("<I" if f.type == "fixed32" else "<i" if f.type == "sfixed32"
                                             else "<f", data, pos)[0]]
                pos += 4
            else:
                raise DecodeError("%s.%s (%s) came with wire type %d" % (message, f.name, f.type, wire))
            if f.repeated:
                out.setdefault(f.name, []).extend(values)
            else:
                if f.oneof:
                    for other in fields.values():
                        if other.oneof == f.oneof and other.name != f.name:
                            out.pop(other.name, None)
                out[f.name] = values[-1]
        return out


def _block(text, brace):
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1:i]
    raise DecodeError("unbalanced braces")


_FIELD = re.compile(r"^\s*(repeated\s+)?([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;", re.M)


def _fields(body, oneof=None):
    for m in _FIELD.finditer(body):
        if m.group(2) in ("reserved", "option"):
            continue
        yield Field(m.group(3), m.group(2).split(".")[-1], int(m.group(4)), bool(m.group(1)), oneof)


def _uvarint(data, pos):
    v = shift = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated varint")
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")


def _signed(v, type_):
    if type_ in ("int32", "int64") and v >= 1 << 63:
        return v - (1 << 64)
    if type_ == "bool":
        return bool(v)
    return v


def _packed(chunk, f):
    out = []
    if f.type in VARINT_TYPES:
        pos = 0
        while pos < len(chunk):
            v, pos = _uvarint(chunk, pos)
            out.append(_signed(v, f.type))
    elif f.type in FIXED64_TYPES:
        if len(chunk) % 8:
            raise DecodeError("packed %s of %d bytes" % (f.name, len(chunk)))
        out = list(struct.unpack("<%d%s" % (len(chunk) // 8, "Q" if f.type == "fixed64" else "q"
                                            if f.type == "sfixed64" else "d"), chunk))
    elif f.type in FIXED32_TYPES:
        if len(chunk) % 4:
            raise DecodeError("packed %s of %d bytes" % (f.name, len(chunk)))
        out = list(struct.unpack("<%d%s" % (len(chunk) // 4, "I" if f.type == "fixed32" else "i"
                                            if f.type == "sfixed32" else "f"), chunk))
    return out
