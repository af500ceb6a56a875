//! What the engine read from a call beside its fingerprints ([`crate::compare`]), for the
//! rules that look past exact repetition: whether the call changes state, whether its
//! result is an outcome worth comparing across calls, its growth signature, the shape of its
//! arguments (a hash with digits left out: the same edit again, at another line or port, has
//! the same shape) and their SimHash. All zero (the default) reads as "nothing known": a
//! call with default traits is detected exactly as before them.
//!
//! Two halves, filled from different spans when one call is traced twice: the arguments'
//! half ([`CallTraits::WRITES`], [`CallTraits::MOVES`], [`CallTraits::NEAR`], the shape and
//! the SimHash) and the result's half (the rest). Packed into 64 bits for the registry
//! ([`CallTraits::pack`]): flags 8, growth 8, shape 16, SimHash 32.

/// Flags and signatures of one call (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallTraits {
    flags: u8,
    /// Growth signature of the compared result, when [`CallTraits::GROWTH`].
    growth: u8,
    /// Shape of the arguments of a call that changes state (0 otherwise).
    shape: u16,
    /// SimHash of the arguments, when [`CallTraits::NEAR`].
    near: u32,
}

impl CallTraits {
    /// The call writes files or changes state (an edit, `sed -i`, a redirection).
    pub const WRITES: u8 = 1;
    /// The call only moves the session (`cd ..`): its effect is never in its result.
    pub const MOVES: u8 = 1 << 1;
    /// The SimHash of the arguments is set.
    pub const NEAR: u8 = 1 << 2;
    /// The result counts as an outcome (an error, or a result that says something).
    pub const OUTCOME: u8 = 1 << 3;
    /// The call failed (error status).
    pub const ERROR: u8 = 1 << 4;
    /// Volatile patterns changed the result before it was compared.
    pub const NOISE: u8 = 1 << 5;
    /// The growth signature is set.
    pub const GROWTH: u8 = 1 << 6;
    /// The error matched `transient_errors`: the call counts toward no pattern.
    pub const TRANSIENT: u8 = 1 << 7;

    const ARGUMENTS: u8 = Self::WRITES | Self::MOVES | Self::NEAR;

    /// Traits with `flags` set (signatures unset).
    pub fn with_flags(flags: u8) -> Self {
        CallTraits {
            flags,
            ..Self::default()
        }
    }

    /// Sets `flag` when `on`, clears it otherwise.
    pub fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    /// True when every bit of `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag == flag
    }

    /// The flag bits.
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Sets the growth signature (its low 8 bits; [`crate::compare::signature::growth`]) and
    /// [`CallTraits::GROWTH`].
    pub fn set_growth(&mut self, signature: u32) {
        self.growth = signature as u8;
        self.flags |= Self::GROWTH;
    }

    /// The growth signature, when set.
    pub fn growth(&self) -> Option<u8> {
        self.has(Self::GROWTH).then_some(self.growth)
    }

    /// Sets the arguments' SimHash and [`CallTraits::NEAR`].
    pub fn set_near(&mut self, simhash: u32) {
        self.near = simhash;
        self.flags |= Self::NEAR;
    }

    /// The arguments' SimHash, when set.
    pub fn near(&self) -> Option<u32> {
        self.has(Self::NEAR).then_some(self.near)
    }

    /// Sets the arguments' shape ([`crate::compare::signature::shape`]).
    pub fn set_shape(&mut self, shape: u16) {
        self.shape = shape;
    }

    /// The arguments' shape (0 when not read).
    pub fn shape(&self) -> u16 {
        self.shape
    }

    /// True for a call that changes state ([`CallTraits::WRITES`] or [`CallTraits::MOVES`]).
    pub fn mutates(&self) -> bool {
        self.flags & (Self::WRITES | Self::MOVES) != 0
    }

    /// These traits with the arguments' half taken from `other`.
    pub fn with_arguments_of(self, other: CallTraits) -> CallTraits {
        CallTraits {
            flags: (self.flags & !Self::ARGUMENTS) | (other.flags & Self::ARGUMENTS),
            growth: self.growth,
            shape: other.shape,
            near: other.near,
        }
    }

    /// These traits with the result's half taken from `other`.
    pub fn with_result_of(self, other: CallTraits) -> CallTraits {
        CallTraits {
            flags: (self.flags & Self::ARGUMENTS) | (other.flags & !Self::ARGUMENTS),
            growth: other.growth,
            shape: self.shape,
            near: self.near,
        }
    }

    /// 64 bits: flags (8), growth (8), shape (16), SimHash (32).
    pub fn pack(self) -> u64 {
        u64::from(self.flags)
            | u64::from(self.growth) << 8
            | u64::from(self.shape) << 16
            | u64::from(self.near) << 32
    }

    /// The traits [`CallTraits::pack`] packed.
    pub fn unpack(bits: u64) -> CallTraits {
        CallTraits {
            flags: bits as u8,
            growth: (bits >> 8) as u8,
            shape: (bits >> 16) as u16,
            near: (bits >> 32) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_splits_into_halves() {
        let mut call = CallTraits::with_flags(CallTraits::WRITES);
        call.set_near(0xDEAD_BEEF);
        call.set_shape(0xCAFE);
        let mut result = CallTraits::with_flags(CallTraits::OUTCOME | CallTraits::ERROR);
        result.set_growth(0x0123_4567);
        let both = call.with_result_of(result);
        assert_eq!(CallTraits::unpack(both.pack()), both);
        assert_eq!(both.growth(), Some(0x67));
        assert_eq!((both.near(), both.shape()), (Some(0xDEAD_BEEF), 0xCAFE));
        assert!(both.has(CallTraits::WRITES | CallTraits::OUTCOME) && both.mutates());
        let arguments = CallTraits::default().with_arguments_of(both);
        assert_eq!(
            (arguments.near(), arguments.growth()),
            (Some(0xDEAD_BEEF), None)
        );
        assert!(!arguments.has(CallTraits::OUTCOME));
    }
}
