//! Flag sets with the D3D12 bit values: a newtype over `u32` per set, its named flags,
//! checked conversion from bits, `contains` and `|`.

macro_rules! d3d12_flags {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$flag_meta:meta])* $flag:ident = $value:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name(u32);

        impl $name {
            $( $(#[$flag_meta])* pub const $flag: Self = Self($value); )*
            const ALL: u32 = 0 $( | $value )*;

            /// The set from its D3D12 bits; `None` if an unknown bit is set.
            pub fn from_bits(bits: u32) -> Option<Self> {
                (bits & !Self::ALL == 0).then_some(Self(bits))
            }

            /// The D3D12 bits.
            pub fn bits(self) -> u32 {
                self.0
            }

            /// Whether every flag of `other` is set.
            pub fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
        }

        impl std::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }
    };
}

pub(crate) use d3d12_flags;
