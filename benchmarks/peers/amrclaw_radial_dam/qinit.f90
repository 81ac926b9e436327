! Radial dam break initial state: still water, depth H_IN inside radius R0, H_OUT
! outside.  Point value at the cell centre (as forestpy's demos/radial_dam.py).
subroutine qinit(meqn, mbc, mx, my, xlower, ylower, dx, dy, q, maux, aux)
    implicit none
    integer, intent(in) :: meqn, mbc, mx, my, maux
    real(kind=8), intent(in) :: xlower, ylower, dx, dy
    real(kind=8), intent(inout) :: q(meqn, 1-mbc:mx+mbc, 1-mbc:my+mbc)
    real(kind=8), intent(inout) :: aux(maux, 1-mbc:mx+mbc, 1-mbc:my+mbc)

    real(kind=8), parameter :: R0 = 0.5d0, H_IN = 2.d0, H_OUT = 1.d0
    integer :: i, j
    real(kind=8) :: xc, yc

    do j = 1, my
        yc = ylower + (j - 0.5d0) * dy
        do i = 1, mx
            xc = xlower + (i - 0.5d0) * dx
            if (sqrt(xc**2 + yc**2) < R0) then
                q(1, i, j) = H_IN
            else
                q(1, i, j) = H_OUT
            end if
            q(2, i, j) = 0.d0
            q(3, i, j) = 0.d0
        end do
    end do
end subroutine qinit
